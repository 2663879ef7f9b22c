//! Local retention's threshold (docs/streams.md "Local retention"): the
//! option `--stream-release-bytes N` of `paralog run`, `server` and
//! `recover`, `stream drain --release-bytes N`, and the setting
//! PARALOG_STREAM_RELEASE_BYTES, parsed here for all of them.

use anyhow::anyhow;

/// The threshold when neither the option nor the setting gives one.
pub const DEFAULT: &str = "64M";

/// `--stream-release-bytes`, for the commands that run a drain of the
/// node's streams.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ReleaseArg {
    /// Local retention of the streams: once the drained segments of ended
    /// producers plus the cut log amount to this many bytes (on some node,
    /// in a server job), they are deleted from the node(s) and the cut log
    /// rebased (docs/streams.md "Local retention"); 0: never (K, M, G)
    /// [env: PARALOG_STREAM_RELEASE_BYTES; default: 64M]
    #[arg(long = "stream-release-bytes", value_parser = parse, value_name = "BYTES")]
    pub stream_release_bytes: Option<u64>,
}

impl ReleaseArg {
    /// The threshold (`DrainOptions::release_bytes`; `u64::MAX`: never).
    pub fn resolve(&self) -> anyhow::Result<u64> {
        threshold(self.stream_release_bytes)
    }

    /// The option that gives a server a resolved threshold (`paralog run`
    /// starts its server with it).
    pub fn to_args(threshold: u64) -> [String; 2] {
        let n = match threshold {
            u64::MAX => 0,
            n => n,
        };
        ["--stream-release-bytes".into(), n.to_string()]
    }
}

/// The threshold given as an option, else PARALOG_STREAM_RELEASE_BYTES,
/// else 64M; 0 is never (`u64::MAX`).
pub fn threshold(given: Option<u64>) -> anyhow::Result<u64> {
    let n = match given {
        Some(n) => n,
        None => match std::env::var("PARALOG_STREAM_RELEASE_BYTES")
            .ok()
            .filter(|v| !v.trim().is_empty())
        {
            Some(v) => parse(&v).map_err(|e| anyhow!("PARALOG_STREAM_RELEASE_BYTES={v}: {e}"))?,
            None => parse(DEFAULT).expect("the default parses"),
        },
    };
    Ok(if n == 0 { u64::MAX } else { n })
}

/// A size (`4096`, `64K`, `256M`, `1G`), or 0 (never).
pub fn parse(s: &str) -> Result<u64, String> {
    match s.trim() {
        "0" => Ok(0),
        t => crate::server::parse_bytes(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_zero_parse_and_zero_is_never() {
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse("64M"), Ok(64 << 20));
        assert_eq!(parse("1"), Ok(1));
        assert!(parse("-1").is_err() && parse("lots").is_err());
        assert_eq!(threshold(Some(0)).unwrap(), u64::MAX);
        assert_eq!(threshold(Some(4096)).unwrap(), 4096);
        assert_eq!(ReleaseArg::to_args(u64::MAX)[1], "0");
        assert_eq!(ReleaseArg::to_args(4096)[1], "4096");
    }
}
