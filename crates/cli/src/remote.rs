//! The `--remote` argument shared by the commands that drain.

use anyhow::{anyhow, bail};
use paralog_backend::RemoteUrl;
pub use paralog_server::remote::Remote;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum S3Upload {
    /// Once per open of a file, when it is closed.
    Close,
    /// At every committed epoch.
    Epoch,
}

#[derive(clap::Args, Debug)]
pub struct RemoteArg {
    /// Where to drain: /path or file:///path, s3://BUCKET/PREFIX,
    /// objstore:///ROOT [env: PARALOG_REMOTE; default: the prefix itself,
    /// i.e. each file goes to the path the program wrote]
    #[arg(long, value_name = "URL")]
    pub remote: Option<String>,
    /// S3 upload policy (same as `?upload=` in the URL) [default: close]
    #[arg(long, value_enum, value_name = "WHEN")]
    pub s3_upload: Option<S3Upload>,
}

impl RemoteArg {
    /// The remote from `--remote` or PARALOG_REMOTE, parsed, with the
    /// upload policy folded into an s3:// URL's settings.
    pub fn url(&self) -> anyhow::Result<Option<RemoteUrl>> {
        let text = self
            .remote
            .clone()
            .or_else(|| std::env::var("PARALOG_REMOTE").ok())
            .filter(|r| !r.is_empty());
        let Some(text) = text else {
            if self.s3_upload.is_some() {
                bail!("--s3-upload is for an s3:// remote");
            }
            return Ok(None);
        };
        let mut url: RemoteUrl = text.parse().map_err(|e| anyhow!("--remote {e}"))?;
        if let Some(policy) = self.s3_upload {
            let RemoteUrl::S3(s3) = &mut url else {
                bail!("--s3-upload is for an s3:// remote");
            };
            if text.contains("upload=") {
                bail!("{text}: give the upload policy once (--s3-upload or ?upload=)");
            }
            s3.upload = match policy {
                S3Upload::Close => paralog_backend::S3Upload::Close,
                S3Upload::Epoch => paralog_backend::S3Upload::Epoch,
            };
        }
        Ok(Some(url))
    }

    pub fn resolve(&self) -> anyhow::Result<Remote> {
        Remote::new(self.url()?).map_err(|e| anyhow!("--remote: {e}"))
    }

    /// `resolve`, and refuse a remote that cannot work as given (an object
    /// root that does not exist) at once, rather than drain into retries
    /// forever.
    pub fn resolve_checked(&self) -> anyhow::Result<Remote> {
        let remote = self.resolve()?;
        if let Remote::Url(url, backend) = &remote {
            backend
                .check()
                .map_err(|e| anyhow!("--remote {url}: {e}"))?;
        }
        Ok(remote)
    }
}
