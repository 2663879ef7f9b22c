//! Agreements: every server's local outcome of a step, combined, so that
//! all servers take the same next step (a local failure is a flag in the
//! next agreement, never an early return on one node alone).

use super::mpi::{MpiError, Reduce};
use super::Coordinator;
use crate::retry::Failure;

impl Coordinator {
    /// Every server's message (empty where it had none), joined.
    pub(super) fn messages(&self, mine: Option<&str>) -> Result<String, MpiError> {
        let (all, counts) = self
            .dog
            .watch(|| self.comm.gather_bytes(mine.unwrap_or("").as_bytes(), None))?;
        let mut out = Vec::new();
        let mut at = 0;
        for c in counts {
            if c > 0 {
                out.push(String::from_utf8_lossy(&all[at..at + c]).into_owned());
            }
            at += c;
        }
        Ok(out.join("; "))
    }

    /// One agreement on a step's local outcomes.
    pub(super) fn agree(&self, local: Option<Failure>) -> Result<Option<Failure>, MpiError> {
        let code = match &local {
            None => 0,
            Some(Failure::Retry(_)) => 1,
            Some(Failure::Park { .. }) => 2,
        };
        let mut v = [code];
        self.dog
            .watch(|| self.comm.allreduce(&mut v, Reduce::Max))?;
        if v[0] == 0 {
            return Ok(None);
        }
        let text = local
            .as_ref()
            .map(|f| format!("node {}: {}", self.cfg.node, f.message()));
        let all = self.messages(text.as_deref())?;
        Ok(Some(if v[0] == 2 {
            Failure::damaged(all)
        } else {
            Failure::Retry(all)
        }))
    }

    /// Every server's count, added up (on every server).
    pub(super) fn sum(&self, mine: u64) -> Result<u64, MpiError> {
        let mut v = [mine as i64];
        self.dog
            .watch(|| self.comm.allreduce(&mut v, Reduce::Sum))?;
        Ok(v[0] as u64)
    }
}
