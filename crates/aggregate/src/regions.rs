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
//!
//! On S3 a container is one multipart upload whose parts several nodes
//! upload (`place_parts`): a node's region is a whole number of parts of
//! its own, every part but the object's last at least S3's minimum. So a
//! region is padded with zeros to a multiple of the alignment, and a
//! region under the minimum part is made the container's last (the
//! smallest such region: its padding would cost the most) or, when it
//! cannot be (another small region is last), padded to the minimum
//! (docs/aggregate.md, "Each node its own region", S3).

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

/// S3's rule for the parts of one multipart object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartRule {
    /// Every part but the object's last is at least this (S3: 5 MiB).
    pub min: u64,
    /// The part size wanted (the URL's `part_size`, at least `min`);
    /// doubled until the parts fit in `max_parts`.
    pub size: u64,
    /// At most this many parts per object (S3: 10,000).
    pub max_parts: u64,
    /// No part larger than this (S3: 5 GiB).
    pub max_part: u64,
}

/// One node's region of a container made of parts: its parts, numbered
/// alike on every node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartRegion {
    pub container: u32,
    pub node: u64,
    /// Its first byte's offset in the container (the parts before it).
    pub start: u64,
    /// The number of its first part (S3's, from 1).
    pub first_part: u32,
    /// Its parts' lengths in order: its members' bytes, their alignment
    /// holes and its padding, as zeros.
    pub parts: Vec<u64>,
}

impl PartRegion {
    /// Its end: `start` plus its parts.
    pub fn end(&self) -> u64 {
        self.start + self.parts.iter().sum::<u64>()
    }
}

/// The placement of `place_parts`: every entry's slot and each
/// container's length (as `place`), and the regions' parts, in container
/// then offset order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartPlacement {
    pub regions: Regions,
    pub parts: Vec<PartRegion>,
}

/// Place `entries` as `place` does, but so that every node's region is a
/// whole number of parts under `rule` (see the module's comment): inside
/// its region each node's members follow each other at multiples of
/// `align` (the region starts at one); a region's length is its end
/// rounded up to `align`, and to `rule.min` when it is under the minimum,
/// except the container's last, which ends at its last byte. Regions
/// follow each other by node, except that the smallest region under the
/// minimum goes last. A node whose members hold no byte has no region.
/// Refused when a container's regions need more than `rule.max_parts`
/// parts even of the largest part size.
pub fn place_parts(entries: &[Entry], align: u64, rule: PartRule) -> Result<PartPlacement, String> {
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_by_key(|&i| (entries[i].group, entries[i].node, i));
    // Each (group, node) run of `order`, with its members' offsets
    // relative to the region's start and the region's bytes.
    let mut rel = vec![0u64; entries.len()];
    let mut runs: Vec<(u64, u64, Vec<usize>, u64)> = Vec::new();
    for &i in &order {
        let e = entries[i];
        if !matches!(runs.last(), Some((g, n, ..)) if *g == e.group && *n == e.node) {
            runs.push((e.group, e.node, Vec::new(), 0));
        }
        let (_, _, members, end) = runs.last_mut().expect("pushed");
        let at = end.next_multiple_of(align);
        if e.len > 0 {
            rel[i] = at;
            *end = at + e.len;
        }
        members.push(i);
    }
    let mut slots = vec![
        Slot {
            container: 0,
            offset: 0
        };
        entries.len()
    ];
    let mut sizes = Vec::new();
    let mut parts = Vec::new();
    let mut from = 0;
    while from < runs.len() {
        let group = runs[from].0;
        let to = (from..runs.len())
            .find(|&r| runs[r].0 != group)
            .unwrap_or(runs.len());
        let k = sizes.len() as u32;
        // Regions with bytes, by node; the smallest one under the minimum
        // (ties: the lower node) moved last.
        let mut live: Vec<usize> = (from..to).filter(|&r| runs[r].3 > 0).collect();
        let small = live
            .iter()
            .copied()
            .filter(|&r| runs[r].3 < rule.min)
            .min_by_key(|&r| (runs[r].3, runs[r].1));
        if let Some(s) = small {
            live.retain(|&r| r != s);
            live.push(s);
        }
        let room: Vec<u64> = live
            .iter()
            .enumerate()
            .map(|(j, &r)| {
                if j + 1 == live.len() {
                    runs[r].3
                } else {
                    runs[r].3.max(rule.min).next_multiple_of(align)
                }
            })
            .collect();
        let part = part_size(&room, rule)?;
        let mut start = 0u64;
        let mut number = 1u32;
        for (&r, &len) in live.iter().zip(&room) {
            let n = (len / part).max(1);
            let mut lens = vec![part; n as usize - 1];
            lens.push(len - (n - 1) * part);
            for &i in &runs[r].2 {
                slots[i] = Slot {
                    container: k,
                    offset: start + rel[i],
                };
            }
            parts.push(PartRegion {
                container: k,
                node: runs[r].1,
                start,
                first_part: number,
                parts: lens,
            });
            start += len;
            number += n as u32;
        }
        for (_, _, members, bytes) in &runs[from..to] {
            if *bytes == 0 {
                // Empty members only: no region, no byte (offset 0).
                for &i in members {
                    slots[i] = Slot {
                        container: k,
                        offset: 0,
                    };
                }
            }
        }
        sizes.push(start);
        from = to;
    }
    Ok(PartPlacement {
        regions: Regions { slots, sizes },
        parts,
    })
}

/// The part size for regions of `room` bytes: `rule.size`, doubled until
/// their parts (at least one each, the last of each up to twice the size)
/// number at most `rule.max_parts`.
fn part_size(room: &[u64], rule: PartRule) -> Result<u64, String> {
    let mut part = rule.size.max(rule.min).max(1);
    loop {
        let count: u64 = room.iter().map(|&l| (l / part).max(1)).sum();
        let largest = room
            .iter()
            .map(|&l| l - ((l / part).max(1) - 1) * part)
            .max()
            .unwrap_or(0);
        if count <= rule.max_parts && largest <= rule.max_part {
            return Ok(part);
        }
        if count > rule.max_parts && part * 2 <= rule.max_part / 2 {
            part *= 2;
            continue;
        }
        return Err(format!(
            "{} node regions of {} bytes do not fit in {} parts of at most {} bytes",
            room.len(),
            room.iter().sum::<u64>(),
            rule.max_parts,
            rule.max_part
        ));
    }
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

    const MIB: u64 = 1 << 20;
    const RULE: PartRule = PartRule {
        min: 5 * MIB,
        size: 5 * MIB,
        max_parts: 10_000,
        max_part: 5 << 30,
    };

    /// Every region's parts: the numbers follow each other from 1 in
    /// offset order, every part but the container's last at least the
    /// minimum, and the members inside their region, aligned.
    fn check_parts(entries: &[Entry], p: &PartPlacement, align: u64, rule: PartRule) {
        for (k, &size) in p.regions.sizes.iter().enumerate() {
            let regions: Vec<&PartRegion> =
                p.parts.iter().filter(|r| r.container == k as u32).collect();
            let mut at = 0;
            let mut number = 1;
            for (j, r) in regions.iter().enumerate() {
                assert_eq!((r.start, r.first_part), (at, number), "{p:?}");
                assert_eq!(r.start % align, 0);
                for (q, &len) in r.parts.iter().enumerate() {
                    let last = j + 1 == regions.len() && q + 1 == r.parts.len();
                    assert!(
                        last || len >= rule.min,
                        "part {len} under the minimum: {p:?}"
                    );
                    assert!(len <= rule.max_part);
                }
                at = r.end();
                number += r.parts.len() as u32;
            }
            assert_eq!(at, size);
            assert!(u64::from(number) - 1 <= rule.max_parts);
        }
        for (i, e) in entries.iter().enumerate() {
            let s = p.regions.slots[i];
            if e.len == 0 {
                continue;
            }
            let r = p
                .parts
                .iter()
                .find(|r| r.container == s.container && r.node == e.node)
                .expect("a region of its node");
            assert!(s.offset >= r.start && s.offset + e.len <= r.end(), "{p:?}");
            assert_eq!(s.offset % align, 0);
        }
    }

    #[test]
    fn regions_are_whole_parts_and_a_small_region_goes_last() {
        // Node 0 holds 3 MiB (under the minimum), node 1 12 MiB: node 0's
        // region is the container's last, no padding; node 1's is two
        // parts (5 MiB, then the rest).
        let entries = [e(0, 0, MIB), e(0, 0, 2 * MIB), e(0, 1, 12 * MIB)];
        let p = place_parts(&entries, 64 << 10, RULE).unwrap();
        check_parts(&entries, &p, 64 << 10, RULE);
        assert_eq!(
            p.parts,
            vec![
                PartRegion {
                    container: 0,
                    node: 1,
                    start: 0,
                    first_part: 1,
                    parts: vec![5 * MIB, 7 * MIB]
                },
                PartRegion {
                    container: 0,
                    node: 0,
                    start: 12 * MIB,
                    first_part: 3,
                    parts: vec![3 * MIB]
                },
            ]
        );
        assert_eq!(p.regions.sizes, vec![15 * MIB]);
        assert_eq!(p.regions.slots[0].offset, 12 * MIB);
    }

    #[test]
    fn a_second_small_region_is_padded_to_the_minimum() {
        // Nodes 0 and 1 both under the minimum: the smaller (node 1) is
        // last, node 0's is padded with zeros to 5 MiB. Another group is
        // another container, its parts numbered from 1 again.
        let entries = [
            e(0, 0, 3 * MIB),
            e(0, 1, 2 * MIB),
            e(0, 2, 0),
            e(1, 3, 7 * MIB + 1),
        ];
        let p = place_parts(&entries, 1 << 20, RULE).unwrap();
        check_parts(&entries, &p, 1 << 20, RULE);
        let lens: Vec<(u32, u64, u32, Vec<u64>)> = p
            .parts
            .iter()
            .map(|r| (r.container, r.node, r.first_part, r.parts.clone()))
            .collect();
        assert_eq!(
            lens,
            vec![
                (0, 0, 1, vec![5 * MIB]),
                (0, 1, 2, vec![2 * MIB]),
                (1, 3, 1, vec![7 * MIB + 1]),
            ]
        );
        assert_eq!(p.regions.sizes, vec![7 * MIB, 7 * MIB + 1]);
        // Node 2 holds only an empty member: no region.
        assert!(p.parts.iter().all(|r| r.node != 2));
    }

    #[test]
    fn parts_grow_to_fit_the_part_limit() {
        // 3 nodes of 40 MiB each and at most 6 parts: 5 MiB parts would
        // be 24; 20 MiB parts make 2 per region.
        let rule = PartRule {
            max_parts: 6,
            ..RULE
        };
        let entries = [e(0, 0, 40 * MIB), e(0, 1, 40 * MIB), e(0, 2, 40 * MIB)];
        let p = place_parts(&entries, 4096, rule).unwrap();
        check_parts(&entries, &p, 4096, rule);
        assert!(p.parts.iter().all(|r| r.parts == vec![20 * MIB; 2]));
        // More regions than parts: refused, saying why.
        let rule = PartRule {
            max_parts: 2,
            ..RULE
        };
        let e3 = place_parts(&entries, 4096, rule).unwrap_err();
        assert!(e3.contains("do not fit in 2 parts"), "{e3}");
    }

    #[test]
    fn uneven_regions_always_make_valid_parts() {
        // Many mixes of small and large regions over 2 groups.
        let lens = [
            0,
            1,
            4 * MIB,
            5 * MIB,
            5 * MIB + 1,
            9 * MIB,
            10 * MIB + 3,
            23 * MIB,
        ];
        for a in lens {
            for b in lens {
                for c in lens {
                    let entries = [e(0, 0, a), e(0, 1, b), e(0, 1, c), e(1, 2, c), e(1, 3, a)];
                    for align in [4096, 1 << 20] {
                        let p = place_parts(&entries, align, RULE).unwrap();
                        check_parts(&entries, &p, align, RULE);
                    }
                }
            }
        }
    }
}
