//! The small identifiers of the log: which epoch of which open of a file.

/// An epoch of one open of a file: the open's generation and the epoch's
/// number in it. Orders like the program did: generation first, then epoch.
/// Shown as `gen:epoch`, as `inspect` and the messages write it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EpochId {
    pub gen: u64,
    pub epoch: u64,
}

impl EpochId {
    pub const fn new(gen: u64, epoch: u64) -> EpochId {
        EpochId { gen, epoch }
    }
}

impl std::fmt::Display for EpochId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.gen, self.epoch)
    }
}

/// `gen:epoch`, as [`EpochId`] displays (an S3 object's `paralog-epoch`).
impl std::str::FromStr for EpochId {
    type Err = String;

    fn from_str(s: &str) -> Result<EpochId, String> {
        let bad = || format!("{s:?} is not an epoch (OPEN:EPOCH)");
        let (gen, epoch) = s.split_once(':').ok_or_else(bad)?;
        Ok(EpochId::new(
            gen.parse().map_err(|_| bad())?,
            epoch.parse().map_err(|_| bad())?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_by_open_then_epoch_like_the_pair_did() {
        let pairs = [(2, 1), (1, 9), (1, 2), (3, 0), (2, 7)];
        let mut ids = pairs.map(|(g, e)| EpochId::new(g, e));
        let mut sorted_pairs = pairs;
        ids.sort();
        sorted_pairs.sort();
        assert_eq!(ids, sorted_pairs.map(|(g, e)| EpochId::new(g, e)));
        assert!(EpochId::new(1, u64::MAX) < EpochId::new(2, 0));
        assert!(None < Some(EpochId::default()));
    }

    #[test]
    fn displays_and_parses_as_open_colon_epoch() {
        let id = EpochId::new(3, 17);
        assert_eq!(id.to_string(), "3:17");
        assert_eq!("3:17".parse::<EpochId>(), Ok(id));
        assert!("3".parse::<EpochId>().is_err());
        assert!("3:x".parse::<EpochId>().is_err());
    }
}
