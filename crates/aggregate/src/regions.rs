//! The placement of the "own region" mode (`--agg-mode own`,
//! docs/aggregate.md "Each node its own region"): every node of a server
//! job writes its own members straight into its region of its group's
//! container, so the placement must come out the same on every node from
//! facts every node has (each member's group, node and length), without
//! a message per member.
//!
//! The rule: containers are the groups that hold at least one member, in
//! group order (container k is the k-th of them). Inside a container the
//! members follow each other by (node, order given), each starting at the
//! next multiple of the alignment after the end of the one before; a
//! member of no bytes takes no room. So a node's members form one
//! contiguous region of its container, and the container's length is the
//! end of its last byte (no trailing hole for anyone to truncate to).

/// One member to place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Its group (any number that orders the groups; equal: one container).
    pub group: u64,
    /// The node that writes it.
    pub node: u64,
    /// Its bytes (the sum of its data ranges).
    pub len: u64,
}

/// Where one entry goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Its container's index in the set record.
    pub container: u32,
    /// Its first byte's offset in that container.
    pub offset: u64,
}

/// The placement of every entry (in the order given) and each container's
/// length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regions {
    pub slots: Vec<Slot>,
    pub sizes: Vec<u64>,
}

/// Place `entries` at multiples of `align` (a power of two). Entries of one
/// group and node keep the order they are given in.
pub fn place(entries: &[Entry], align: u64) -> Regions {
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_by_key(|&i| (entries[i].group, entries[i].node, i));
    let mut slots = vec![
        Slot {
            container: 0,
            offset: 0
        };
        entries.len()
    ];
    let mut sizes: Vec<u64> = Vec::new();
    let mut current: Option<u64> = None;
    let mut next = 0u64;
    for i in order {
        let e = entries[i];
        if current != Some(e.group) {
            current = Some(e.group);
            sizes.push(0);
            next = 0;
        }
        let k = sizes.len() - 1;
        slots[i] = Slot {
            container: k as u32,
            offset: next,
        };
        if e.len > 0 {
            sizes[k] = next + e.len;
            next = (next + e.len).next_multiple_of(align);
        }
    }
    Regions { slots, sizes }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(group: u64, node: u64, len: u64) -> Entry {
        Entry { group, node, len }
    }

    #[test]
    fn members_follow_by_node_aligned_and_groups_become_dense_containers() {
        // Given out of order: node 1's member first, a group (5) beside 2.
        let r = place(
            &[
                e(2, 1, 10),
                e(2, 0, 100),
                e(2, 0, 0),
                e(5, 3, 7),
                e(2, 1, 64),
            ],
            64,
        );
        let at: Vec<(u32, u64)> = r.slots.iter().map(|s| (s.container, s.offset)).collect();
        // Node 0: 100 bytes at 0, its empty member takes no room (at 128);
        // node 1: 10 at 128, 64 at 192; the next group is container 1.
        assert_eq!(at, vec![(0, 128), (0, 0), (0, 128), (1, 0), (0, 192)]);
        assert_eq!(r.sizes, vec![256, 7]);
    }

    #[test]
    fn no_entry_no_container_and_empty_members_make_an_empty_one() {
        assert_eq!(place(&[], 4096).sizes, Vec::<u64>::new());
        let r = place(&[e(0, 0, 0)], 4096);
        assert_eq!(r.sizes, vec![0]);
        assert_eq!(r.slots[0].offset, 0);
    }

    #[test]
    fn regions_never_overlap_and_are_aligned() {
        // Every permutation of a few lengths over 3 nodes, 2 groups.
        let lens = [1u64, 4096, 4097, 0, 12345, 8192];
        let entries: Vec<Entry> = lens
            .iter()
            .enumerate()
            .map(|(i, &l)| e((i % 2) as u64, (i % 3) as u64, l))
            .collect();
        let r = place(&entries, 4096);
        for (i, a) in entries.iter().enumerate() {
            let sa = r.slots[i];
            assert_eq!(sa.offset % 4096, 0);
            assert!(sa.offset + a.len <= r.sizes[sa.container as usize]);
            for (j, b) in entries.iter().enumerate().skip(i + 1) {
                let sb = r.slots[j];
                if sa.container == sb.container && a.len > 0 && b.len > 0 {
                    assert!(sa.offset + a.len <= sb.offset || sb.offset + b.len <= sa.offset);
                }
            }
        }
    }
}
