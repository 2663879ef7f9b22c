//! Logged array puts in a server job (docs/objects.md "Logged puts in a
//! server job"). Each server runs the one-node server's publisher on its
//! own node-local root (the CLI's `obj_publish`, reporting its rounds to
//! [`crate::puts::Puts`]); the servers exchange no put's data: a share
//! meets its put in the remote's staging, as between one-node servers.
//! What they agree on, once a round, after the files and the streams:
//!
//! - whether some node's publisher left something new to show: then
//!   every node's list travels (one allgatherv), so that the `status` and
//!   the `wait` answer of any server show every node's puts;
//! - once the job is finishing (a `wait` or `finish` on any node, or
//!   `recover`): whether every node's publisher has had a round begun
//!   after this server saw the finish that left nothing that may still
//!   publish (as the one-node server's wait, crate::puts). The job ends
//!   only then, with the files' drain: a put committed on node 0 whose
//!   share is on node 1 keeps every server going until node 1's publisher
//!   copied the share and node 0's published the version.
//!
//! `recover` (the job finishing from its first round) must end even when
//! a put waits for a node that is not in the job, or for a remote out of
//! reach, as the one-node `recover` does after its one round: it waits
//! for two passes instead, each a round begun after an agreement on every
//! node (the first copies every share, the second publishes what the
//! shares completed), and reports what is left.
//!
//! Cost: one allreduce of two integers a round; the lists only in rounds
//! that changed one.

use super::mpi::Reduce;
use super::wire::{DecodeError, In, Out};
use super::{ClusterError, Coordinator};
use crate::puts::{PutState, PutStatus};

/// Passes of `recover` (see the module's text).
const RECOVER_PASSES: u32 = 2;

#[derive(Default)]
pub(super) struct PutRounds {
    /// The generation of this node's puts last sent to the others.
    sent: Option<u64>,
    /// Where this server's wait for its publisher started (the round it
    /// first saw the job finishing, or `recover`'s current pass).
    mark: Option<u64>,
    /// `recover`: passes every node completed.
    passes: u32,
    /// Every node's puts left (node order), and those published, as last
    /// sent: the same on every server.
    pub(super) left: Vec<PutStatus>,
    pub(super) published: u64,
    /// Whether the job's puts let it end (what the last finishing round
    /// agreed).
    done: bool,
}

impl PutRounds {
    /// The lines of `Totals::failed`: puts that can never be published as
    /// they are; after `recover`, also those its passes could not publish
    /// for a failure (a remote out of reach).
    pub(super) fn failed(&self, recover: bool) -> impl Iterator<Item = String> + '_ {
        self.left
            .iter()
            .filter(move |p| {
                p.state == PutState::Failed
                    || (recover && self.done && p.state != PutState::Waiting)
            })
            .map(line)
    }
}

/// `logged array NAME put ID (node N): why`.
fn line(p: &PutStatus) -> String {
    let what = if p.share { "share of put" } else { "put" };
    format!(
        "logged array {} {what} {} (node {}): {}",
        p.name,
        p.id,
        p.node.as_deref().unwrap_or("?"),
        p.message
    )
}

fn state_code(s: PutState) -> u64 {
    match s {
        PutState::Waiting => 0,
        PutState::Retrying => 1,
        PutState::Failed => 2,
    }
}

fn encode(node: &str, published: u64, pending: &[PutStatus]) -> Vec<u8> {
    let mut o = Out::default();
    o.bytes(node.as_bytes());
    o.u64(published);
    o.u64(pending.len() as u64);
    for p in pending {
        o.bytes(p.name.as_bytes());
        o.bytes(p.id.as_bytes());
        o.bool(p.share);
        o.u64(state_code(p.state));
        o.u64(p.waits_for.len() as u64);
        for w in &p.waits_for {
            o.bytes(w.as_bytes());
        }
        o.bytes(p.message.as_bytes());
    }
    o.0
}

/// One server's message: its published count and its puts, each named
/// with its node.
fn decode(b: &[u8], from: usize) -> Result<(u64, Vec<PutStatus>), DecodeError> {
    let mut i = In::new(b, from);
    let node = i.string()?;
    let published = i.u64()?;
    let pending = i.list(|i| {
        let name = i.string()?;
        let id = i.string()?;
        let share = i.bool()?;
        let state = match i.u64()? {
            0 => PutState::Waiting,
            1 => PutState::Retrying,
            2 => PutState::Failed,
            _ => return Err(i.err("a put's state")),
        };
        Ok(PutStatus {
            name,
            id,
            share,
            state,
            waits_for: i.list(|i| i.string())?,
            message: i.string()?,
            node: Some(node.clone()),
        })
    })?;
    i.done()?;
    Ok((published, pending))
}

impl Coordinator {
    /// This round's agreement on the logged puts (see the module's text):
    /// whether they let a finishing job end (always without a publisher).
    pub(super) fn agree_puts(&mut self, finishing: bool) -> Result<bool, ClusterError> {
        let Some(puts) = self.cfg.puts.clone() else {
            return Ok(true);
        };
        let recover = self.cfg.finish_now;
        if finishing && self.puts.mark.is_none() {
            self.puts.mark = Some(puts.mark());
            puts.kick();
        }
        let now = puts.since(self.puts.mark.unwrap_or(u64::MAX));
        let changed = self.puts.sent != Some(now.generation);
        let waiting =
            finishing && !self.puts.done && !(if recover { now.ended } else { now.settled });
        let mut v = [changed as i64, waiting as i64];
        self.dog
            .watch(|| self.comm.allreduce(&mut v, Reduce::Max))?;
        if v[0] != 0 {
            let mine = encode(&self.cfg.node, now.published, &now.pending);
            let (all, counts) = self.dog.watch(|| self.comm.gather_bytes(&mine, None))?;
            let (mut left, mut published, mut at) = (Vec::new(), 0, 0);
            for (i, c) in counts.iter().enumerate() {
                let (n, p) = decode(&all[at..at + c], i)?;
                published += n;
                left.extend(p);
                at += c;
            }
            self.puts.left = left;
            self.puts.published = published;
            self.puts.sent = Some(now.generation);
        }
        // The same on every server: `finishing`, `done`, the agreement.
        if !finishing || self.puts.done || v[1] != 0 {
            return Ok(self.puts.done);
        }
        if recover {
            self.puts.passes += 1;
            if self.puts.passes < RECOVER_PASSES {
                // The next pass: a round begun after this agreement.
                self.puts.mark = Some(puts.mark());
                puts.kick();
                return Ok(false);
            }
        }
        self.puts.done = true;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_puts_travel_whole_and_name_their_node() {
        let p = PutStatus {
            name: "run/t".into(),
            id: "ab".repeat(16),
            share: true,
            state: PutState::Retrying,
            waits_for: vec!["n1".into(), "n2".into()],
            message: "copying: I/O error".into(),
            node: None,
        };
        let b = encode("n3", 7, std::slice::from_ref(&p));
        let (published, got) = decode(&b, 3).unwrap();
        assert_eq!(published, 7);
        assert_eq!(
            got,
            vec![PutStatus {
                node: Some("n3".into()),
                ..p
            }]
        );
        // A cut message is refused naming the server.
        let e = decode(&b[..b.len() - 1], 3).unwrap_err();
        assert_eq!(e.from, 3);
        assert!(decode(&encode("n0", 0, &[]), 0).unwrap().1.is_empty());
    }
}
