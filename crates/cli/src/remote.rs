//! The `--remote` argument shared by the commands that drain.

use anyhow::anyhow;
pub use paralog_server::remote::Remote;

#[derive(clap::Args, Debug)]
pub struct RemoteArg {
    /// Where to drain: file:///path or /path [env: PARALOG_REMOTE; default:
    /// the prefix itself, i.e. each file goes to the path the program wrote]
    #[arg(long, value_name = "URL")]
    pub remote: Option<String>,
}

impl RemoteArg {
    pub fn resolve(&self) -> anyhow::Result<Remote> {
        let url = self
            .remote
            .clone()
            .or_else(|| std::env::var("PARALOG_REMOTE").ok());
        Remote::parse(url.as_deref()).map_err(|e| anyhow!("{e}"))
    }
}
