//! `--aggregate RULE`, `--containers K`, `--agg-align BYTES`, `--agg-mode`: the options of
//! `run`, `server` and `recover` that drain matching files into checkpoint
//! sets (docs/aggregate.md). Parsed and checked here; the server does the
//! work.

use anyhow::{anyhow, bail};
use paralog_aggregate::rule::Rules;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct AggregateArgs {
    /// Drain the files matching RULE into checkpoint sets: a glob relative
    /// to the prefix with one `{set}` component naming the set directory,
    /// e.g. 'ckpt/{set}/rank-*.dat'; repeat it, or separate rules by commas
    /// (docs/aggregate.md) [env: PARALOG_AGGREGATE]
    #[arg(long = "aggregate", value_name = "RULE")]
    pub aggregate: Vec<String>,
    /// Containers per checkpoint set [env: PARALOG_CONTAINERS; default: 1,
    /// one per node]
    #[arg(long, value_name = "K")]
    pub containers: Option<u32>,
    /// Members start at multiples of this in their container (K, M, G)
    #[arg(long, default_value = "1M", value_parser = crate::server::parse_bytes, value_name = "BYTES")]
    pub agg_align: u64,
    /// A server job: receive buffers of a set's leader, each one --buffer,
    /// taken from --memory
    #[arg(long, default_value_t = paralog_server::aggregate::DEFAULT_BUFFERS, value_name = "N")]
    pub agg_buffers: usize,
    /// A server job: who writes a set's containers: `leader` (the other
    /// nodes of a group send their members to its leader over MPI) or `own`
    /// (each node writes its own members into its own region of the
    /// container; POSIX remotes and S3) [env: PARALOG_AGG_MODE; default: own
    /// on a POSIX remote, leader on S3 and the object layout]
    #[arg(long, value_name = "MODE")]
    pub agg_mode: Option<String>,
}

/// What the options say, checked.
#[derive(Debug, Clone)]
pub struct Aggregate {
    pub rules: Rules,
    pub containers: u32,
    /// `--containers` was given (else a server job makes one per node).
    pub containers_given: bool,
    pub align: u64,
    pub buffers: usize,
    /// `None`: the remote's default (`AggMode::default_for`).
    pub mode: Option<paralog_server::aggregate::AggMode>,
}

impl AggregateArgs {
    /// The rules from the options or PARALOG_AGGREGATE (the options win),
    /// `None` when there are none.
    pub fn resolve(&self) -> anyhow::Result<Option<Aggregate>> {
        let values: Vec<String> = if self.aggregate.is_empty() {
            std::env::var("PARALOG_AGGREGATE")
                .ok()
                .filter(|v| !v.trim().is_empty())
                .into_iter()
                .collect()
        } else {
            self.aggregate.clone()
        };
        let containers = match self.containers {
            Some(k) => Some(k),
            None => match std::env::var("PARALOG_CONTAINERS")
                .ok()
                .filter(|v| !v.is_empty())
            {
                None => None,
                Some(v) => Some(v.trim().parse().map_err(|_| {
                    anyhow!("PARALOG_CONTAINERS={v} is not a whole number of containers")
                })?),
            },
        };
        if containers == Some(0) {
            bail!("--containers must be at least 1");
        }
        if !self.agg_align.is_power_of_two() || self.agg_align > 1 << 30 {
            bail!(
                "--agg-align {} is not a power of two up to 1G",
                self.agg_align
            );
        }
        let mode_env = std::env::var("PARALOG_AGG_MODE")
            .ok()
            .filter(|v| !v.is_empty());
        let mode = match (&self.agg_mode, &mode_env) {
            (Some(m), _) => Some(m.parse().map_err(|e| anyhow!("--agg-mode: {e}"))?),
            (None, Some(v)) => Some(
                v.parse()
                    .map_err(|e| anyhow!("PARALOG_AGG_MODE={v}: {e}"))?,
            ),
            (None, None) => None,
        };
        if values.is_empty() {
            if containers.is_some() {
                bail!(
                    "--containers (PARALOG_CONTAINERS) needs --aggregate RULE (PARALOG_AGGREGATE)"
                );
            }
            if mode.is_some() {
                bail!("--agg-mode (PARALOG_AGG_MODE) needs --aggregate RULE (PARALOG_AGGREGATE)");
            }
            return Ok(None);
        }
        let rules = Rules::parse(&values).map_err(|e| anyhow!("--aggregate: {e}"))?;
        Ok(Some(Aggregate {
            rules,
            containers: containers.unwrap_or(1),
            containers_given: containers.is_some(),
            align: self.agg_align,
            buffers: self.agg_buffers,
            mode,
        }))
    }

    /// Capture cannot read S3: with an S3 remote, with or without
    /// `--aggregate` (a restart job need not name the rules: it only reads),
    /// the sets there are listed into the local directory before the
    /// program starts (one listing of the prefix), so that a read of a
    /// member fails naming its set and `paralog extract`
    /// (docs/aggregate.md). A listing that fails is a warning (such a read
    /// then finds no file).
    pub fn index_s3_sets(root: &std::path::Path, remote: &crate::remote::Remote) {
        if let Err(e) = paralog_server::aggregate::write_s3_index(root, remote) {
            eprintln!("paralog: warning: checkpoint sets on S3 not listed for capture: {e}");
        }
    }

    /// Checked against the remote and the engine, as the server takes it.
    pub fn sets(
        agg: Option<Aggregate>,
        remote: &crate::remote::Remote,
        server_job: bool,
    ) -> anyhow::Result<Option<paralog_server::aggregate::Sets>> {
        let Some(agg) = agg else {
            // A member of a published set rewritten by this job makes a
            // new version of the set, with or without rules.
            return Ok((!server_job).then(paralog_server::aggregate::Sets::rewrites_only));
        };
        if agg.buffers == 0 {
            bail!("--agg-buffers must be at least 1");
        }
        let url = match remote {
            crate::remote::Remote::Url(u, _) => Some(u),
            crate::remote::Remote::Prefix => None,
        };
        let mode = agg
            .mode
            .unwrap_or_else(|| paralog_server::aggregate::AggMode::default_for(url));
        paralog_server::aggregate::Sets::check_mode(url, server_job, mode)
            .map_err(|e| anyhow!(e))?;
        let sets = paralog_server::aggregate::Sets::new(agg.rules, agg.containers, agg.align);
        Ok(Some(if server_job {
            sets.for_server_job(!agg.containers_given, agg.buffers)
                .with_mode(mode)
        } else {
            sets
        }))
    }

    /// One line per rule that matched none of the files a run captured
    /// (a typo in a rule must not pass silently).
    pub fn unmatched(
        agg: &Aggregate,
        captured: &std::collections::BTreeSet<Vec<u8>>,
    ) -> Vec<String> {
        agg.rules
            .rules()
            .iter()
            .filter(|r| !captured.iter().any(|rel| r.matches(rel).is_some()))
            .map(|r| {
                format!(
                    "--aggregate {}: the rule matched none of the {} file(s) the program wrote under the prefix; nothing was aggregated by it",
                    r.text(),
                    captured.len()
                )
            })
            .collect()
    }

    /// The same options for a child `paralog server`.
    pub fn to_args(agg: &Aggregate) -> Vec<String> {
        let mut v = Vec::new();
        for r in agg.rules.rules() {
            v.push("--aggregate".into());
            v.push(r.text().into());
        }
        v.push("--containers".into());
        v.push(agg.containers.to_string());
        v.push("--agg-align".into());
        v.push(agg.align.to_string());
        if let Some(mode) = agg.mode {
            v.push("--agg-mode".into());
            v.push(mode.to_string());
        }
        v
    }
}
