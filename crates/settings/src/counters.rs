//! The counters each captured process leaves for `paralog run`'s summary
//! (with `PARALOG_STATS=DIR`: `DIR/<pid>.json`, one line), written by the
//! capture library and read by the command: one type, one encoding, here.

/// One process's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessCounters {
    pub pid: u32,
    /// Bytes the program wrote to captured files.
    pub bytes: u64,
    /// Consistency points (epochs) it committed.
    pub epochs: u64,
    /// Time spent inside consistency points, in nanoseconds.
    pub sync_ns: u64,
}

const FIELDS: [&str; 4] = ["pid", "bytes", "epochs", "sync_ns"];

impl ProcessCounters {
    /// One JSON object on one line (built by hand: the capture library
    /// carries no serializer).
    pub fn encode(&self) -> String {
        format!(
            "{{\"pid\":{},\"bytes\":{},\"epochs\":{},\"sync_ns\":{}}}\n",
            self.pid, self.bytes, self.epochs, self.sync_ns
        )
    }

    /// The counters from what [`encode`](Self::encode) wrote; `None` for
    /// anything else (a file cut short by a process killed mid-write).
    pub fn decode(text: &str) -> Option<ProcessCounters> {
        let body = text.trim().strip_prefix('{')?.strip_suffix('}')?;
        let mut values = [0u64; 4];
        let mut seen = 0;
        for (i, field) in body.split(',').enumerate() {
            let (k, v) = field.split_once(':')?;
            if i >= FIELDS.len() || k.trim() != format!("\"{}\"", FIELDS[i]) {
                return None;
            }
            values[i] = v.trim().parse().ok()?;
            seen += 1;
        }
        if seen != FIELDS.len() {
            return None;
        }
        Some(ProcessCounters {
            pid: u32::try_from(values[0]).ok()?,
            bytes: values[1],
            epochs: values[2],
            sync_ns: values[3],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let c = ProcessCounters {
            pid: 42,
            bytes: 1 << 40,
            epochs: 7,
            sync_ns: 123_456_789,
        };
        assert_eq!(ProcessCounters::decode(&c.encode()), Some(c));
        for bad in [
            "",
            "{\"pid\":1,\"bytes\":2,\"epochs\":3}",
            "{\"pid\":1,\"bytes\":2,\"epochs\":3,\"sync_ns\":",
            "{\"pid\":1,\"epochs\":2,\"bytes\":3,\"sync_ns\":4}",
            "{\"pid\":-1,\"bytes\":2,\"epochs\":3,\"sync_ns\":4}",
            "{\"pid\":1,\"bytes\":2,\"epochs\":3,\"sync_ns\":4,\"x\":5}",
        ] {
            assert_eq!(ProcessCounters::decode(bad), None, "{bad}");
        }
    }
}
