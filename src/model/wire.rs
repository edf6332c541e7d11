//! A pre-scan of a `ModelProto`'s protobuf wire bytes (cold path): counts
//! the nodes and the repeated elements decoding would allocate, so a model
//! of millions of tiny nodes (or attributes, or packed integers) is refused
//! before the decoder allocates ~100 bytes of structure per 2 bytes of
//! file. Malformed bytes end the scan; the decoder then reports them.

/// What decoding `bytes` as a `ModelProto` would allocate, roughly.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct WireCounts {
    /// Nodes of every graph and function.
    pub(super) nodes: u64,
    /// An upper estimate of the decoded bytes: the file, a decoded message
    /// or string per element, eight bytes per packed integer.
    pub(super) decoded_bytes: u64,
}

/// Bytes of decoded structure charged per element (a message or a string
/// of a repeated field): about the largest prost struct of the schema.
const ELEMENT_BYTES: u64 = 256;

/// Nesting below which the scan stops descending (prost's own limit is
/// 100).
const MAX_DEPTH: u32 = 64;

/// Which message a byte range holds.
#[derive(Clone, Copy)]
enum Kind {
    Model,
    Graph,
    Function,
    Node,
    Attribute,
    Tensor,
}

/// Counts `bytes` as a `ModelProto`.
pub(super) fn scan(bytes: &[u8]) -> WireCounts {
    let mut counts = WireCounts {
        nodes: 0,
        decoded_bytes: bytes.len() as u64,
    };
    walk(bytes, Kind::Model, 0, &mut counts);
    counts
}

fn varint(bytes: &[u8], pos: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*pos)?;
        *pos += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// The message kind of field `field` of a `kind` message, when the scan
/// descends into it.
fn child(kind: Kind, field: u64) -> Option<Kind> {
    Some(match (kind, field) {
        (Kind::Model, 7) => Kind::Graph,
        (Kind::Model, 25) => Kind::Function,
        (Kind::Graph, 1) | (Kind::Function, 7) => Kind::Node,
        (Kind::Graph, 5) | (Kind::Attribute, 5 | 10) => Kind::Tensor,
        (Kind::Node, 5) | (Kind::Function, 11) => Kind::Attribute,
        (Kind::Attribute, 6 | 11) => Kind::Graph,
        _ => return None,
    })
}

/// Whether field `field` of `kind` is a packed repeated integer.
fn packed_integers(kind: Kind, field: u64) -> bool {
    matches!(
        (kind, field),
        (Kind::Attribute, 8) | (Kind::Tensor, 1 | 5 | 7 | 11)
    )
}

fn walk(bytes: &[u8], kind: Kind, depth: u32, counts: &mut WireCounts) {
    let mut pos = 0;
    while pos < bytes.len() {
        let Some(tag) = varint(bytes, &mut pos) else {
            return;
        };
        let field = tag >> 3;
        match tag & 7 {
            0 => {
                if varint(bytes, &mut pos).is_none() {
                    return;
                }
            }
            1 => pos += 8,
            5 => pos += 4,
            2 => {
                let Some(len) = varint(bytes, &mut pos) else {
                    return;
                };
                let Some(end) = usize::try_from(len)
                    .ok()
                    .and_then(|len| pos.checked_add(len))
                    .filter(|&end| end <= bytes.len())
                else {
                    return;
                };
                let body = &bytes[pos..end];
                pos = end;
                counts.decoded_bytes = counts.decoded_bytes.saturating_add(ELEMENT_BYTES);
                if packed_integers(kind, field) {
                    let values = body.iter().filter(|b| *b & 0x80 == 0).count() as u64;
                    counts.decoded_bytes = counts.decoded_bytes.saturating_add(values * 8);
                } else if let Some(inner) = child(kind, field) {
                    if matches!(inner, Kind::Node) {
                        counts.nodes += 1;
                    }
                    if depth < MAX_DEPTH {
                        walk(body, inner, depth + 1, counts);
                    }
                }
            }
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::proto::{GraphProto, Message, ModelProto, NodeProto};

    #[test]
    fn counts_nodes_and_charges_empty_ones() {
        let model = ModelProto {
            graph: Some(GraphProto {
                node: vec![NodeProto::default(); 1000],
                ..Default::default()
            }),
            ..Default::default()
        };
        let bytes = model.encode_to_vec();
        let counts = scan(&bytes);
        assert_eq!(counts.nodes, 1000);
        assert!(counts.decoded_bytes >= 1000 * ELEMENT_BYTES);
        assert_eq!(scan(&bytes[..bytes.len() / 2]).nodes, 0, "truncated graph");
        assert_eq!(scan(b"\xff\xff\xff").nodes, 0);
    }
}
