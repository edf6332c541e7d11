//! The companion model (cold path): the cache's manifest as a valid ONNX
//! `ModelProto` — one `UINT8` initializer `prepared/<key>` per packed
//! object, its payload external (one content-addressed file per payload,
//! offset 0, so 64-byte aligned), its identity in `metadata_props` — and
//! the parse that validates it structurally.
//!
//! Model `metadata_props`: `onnx_prepared.cache_format_version`,
//! `onnx_prepared.model_identity`, and one
//! `onnx_prepared.source_digest:<data file key>:<tensor>` per source digest
//! computed by a read (sources that declare none). The data file key
//! (XXH3-64 of the file's canonical path, size and modification time)
//! says which file's bytes the digest was computed from: change detection
//! only, never the identity of an entry (that is the digest).
//!
//! Initializer `metadata_props` (`docs/prepared-cache.md`): the design's
//! `onnx_light.prepack.{source_lineage_digest, source_lineage, layout,
//! device, kernel_abi, format_version}`, `onnx_prepared.payload_checksum`
//! (`xxh3-128:<hex>`) and `onnx_prepared.requirement` (a readable name).

use std::collections::BTreeMap;

use onnx_prepared_proto::tensor_proto::{DataLocation, DataType};
use onnx_prepared_proto::{
    GraphProto, ModelProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
};
use prost::Message;

use super::CacheError;

/// The cache format this build writes and reads.
pub const FORMAT_VERSION: &str = "1";
/// Folder of the payload files, inside the cache directory.
pub const PAYLOAD_DIR: &str = "payloads";

const P: &str = "onnx_light.prepack.";
const K_FORMAT: &str = "onnx_prepared.cache_format_version";
const K_IDENTITY: &str = "onnx_prepared.model_identity";
const K_DIGEST: &str = "onnx_prepared.source_digest:";
const K_CHECKSUM: &str = "onnx_prepared.payload_checksum";
const K_NAME: &str = "onnx_prepared.requirement";

/// The identity of a cache entry: (source lineage digest, layout, device).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryKey {
    /// SHA-256 over the ordered sources' names, types, dims and digests.
    pub lineage: [u8; 32],
    /// The layout key.
    pub layout: String,
    /// Device index (0 = CPU).
    pub device: u16,
}

impl EntryKey {
    /// The initializer name: `prepared/<lineage hex>/<layout>/dev<device>`.
    pub fn tensor_name(&self) -> String {
        format!(
            "prepared/{}/{}/dev{}",
            hex(&self.lineage),
            self.layout,
            self.device
        )
    }
}

/// One persisted prepared object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    /// Its identity.
    pub key: EntryKey,
    /// The readable lineage: `name dtype [dims] sha256:<hex>` per source.
    pub source_lineage: String,
    /// The payload file, relative to the cache directory
    /// (`payloads/<xxh3-128 hex>.bin`).
    pub location: String,
    /// Payload bytes.
    pub length: u64,
    /// XXH3-128 of the payload.
    pub checksum: u128,
    /// The kernels' ABI the payload was packed for.
    pub kernel_abi: String,
    /// The payload format version.
    pub format_version: String,
    /// The requirement's readable name.
    pub name: String,
}

impl CacheEntry {
    /// The payload location for payload bytes with this checksum.
    pub fn location_for(checksum: u128) -> String {
        format!("{PAYLOAD_DIR}/{checksum:032x}.bin")
    }

    /// Whether `location` is exactly a payload name this cache writes
    /// (`payloads/` and 32 lowercase hex digits `.bin`): nothing else is
    /// ever opened, so no entry reaches outside the cache directory.
    pub fn location_is_safe(location: &str) -> bool {
        location
            .strip_prefix(PAYLOAD_DIR)
            .and_then(|s| s.strip_prefix('/'))
            .and_then(|s| s.strip_suffix(".bin"))
            .is_some_and(|h| {
                h.len() == 32
                    && h.bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            })
    }
}

/// One generation of the companion model, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// The source model's identity.
    pub model_identity: String,
    /// Entries, by key.
    pub entries: BTreeMap<EntryKey, CacheEntry>,
    /// Entries that failed structural checks one by one (key text, why):
    /// ignored, reported.
    pub rejected: Vec<(String, String)>,
    /// Digests computed by reads of sources that declare none, by
    /// `<data file key>:<tensor name>`.
    pub source_digests: BTreeMap<String, [u8; 32]>,
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex32(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        *o = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

fn prop(key: impl Into<String>, value: impl Into<String>) -> StringStringEntryProto {
    StringStringEntryProto {
        key: Some(key.into()),
        value: Some(value.into()),
    }
}

impl Manifest {
    /// The companion `ModelProto` (a valid ONNX model with no nodes).
    pub fn to_proto(&self) -> ModelProto {
        let mut props = vec![
            prop(K_FORMAT, FORMAT_VERSION),
            prop(K_IDENTITY, self.model_identity.clone()),
        ];
        for (name, digest) in &self.source_digests {
            props.push(prop(
                format!("{K_DIGEST}{name}"),
                format!("sha256:{}", hex(digest)),
            ));
        }
        let initializer = self
            .entries
            .values()
            .map(|e| TensorProto {
                name: Some(e.key.tensor_name()),
                data_type: Some(DataType::Uint8 as i32),
                dims: vec![e.length as i64],
                data_location: Some(DataLocation::External as i32),
                external_data: vec![
                    prop("location", e.location.clone()),
                    prop("offset", "0"),
                    prop("length", e.length.to_string()),
                ],
                metadata_props: vec![
                    prop(format!("{P}source_lineage_digest"), hex(&e.key.lineage)),
                    prop(format!("{P}source_lineage"), e.source_lineage.clone()),
                    prop(format!("{P}layout"), e.key.layout.clone()),
                    prop(format!("{P}device"), e.key.device.to_string()),
                    prop(format!("{P}kernel_abi"), e.kernel_abi.clone()),
                    prop(format!("{P}format_version"), e.format_version.clone()),
                    prop(K_CHECKSUM, format!("xxh3-128:{:032x}", e.checksum)),
                    prop(K_NAME, e.name.clone()),
                ],
                ..Default::default()
            })
            .collect();
        ModelProto {
            ir_version: Some(10),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(21),
            }],
            producer_name: Some("onnx-prepared".into()),
            producer_version: Some(env!("CARGO_PKG_VERSION").into()),
            doc_string: Some(
                "onnx-prepared cache: prepared objects of one source model (not a graph to run)"
                    .into(),
            ),
            graph: Some(GraphProto {
                name: Some("onnx_prepared_cache".into()),
                initializer,
                ..Default::default()
            }),
            metadata_props: props,
            ..Default::default()
        }
    }

    /// The serialized companion model.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_proto().encode_to_vec()
    }

    /// Parses a companion model. Garbage, another format version or
    /// another model's identity is [`CacheError::Corrupt`] (structural); an
    /// initializer whose fields are damaged is skipped and listed in
    /// [`Manifest::rejected`].
    pub fn parse(bytes: &[u8], path: &std::path::Path) -> Result<Self, CacheError> {
        let corrupt = |detail: String| CacheError::Corrupt {
            path: path.to_owned(),
            detail,
        };
        let proto =
            ModelProto::decode(bytes).map_err(|e| corrupt(format!("not an ONNX model: {e}")))?;
        let mut m = Manifest::default();
        let mut format = None;
        for p in &proto.metadata_props {
            let (k, v) = (p.key(), p.value());
            if k == K_FORMAT {
                format = Some(v.to_owned());
            } else if k == K_IDENTITY {
                m.model_identity = v.to_owned();
            } else if let Some(name) = k.strip_prefix(K_DIGEST) {
                let digest = v.strip_prefix("sha256:").and_then(unhex32).ok_or_else(|| {
                    corrupt(format!("source digest of `{name}` is not sha256:<64 hex>"))
                })?;
                m.source_digests.insert(name.to_owned(), digest);
            }
        }
        match format.as_deref() {
            Some(FORMAT_VERSION) => {}
            Some(other) => {
                return Err(corrupt(format!(
                    "cache format version {other}; this build reads {FORMAT_VERSION}"
                )));
            }
            None => {
                return Err(corrupt(
                    "no cache format version: not an onnx-prepared cache".into(),
                ));
            }
        }
        let graph = proto
            .graph
            .as_ref()
            .ok_or_else(|| corrupt("no graph".into()))?;
        for t in &graph.initializer {
            match entry(t) {
                Ok(e) => {
                    m.entries.insert(e.key.clone(), e);
                }
                Err(why) => m.rejected.push((t.name().to_owned(), why)),
            }
        }
        Ok(m)
    }
}

/// One initializer as an entry, or why it is not one.
fn entry(t: &TensorProto) -> Result<CacheEntry, String> {
    let get = |list: &[StringStringEntryProto], key: &str| -> Result<String, String> {
        let mut found = list.iter().filter(|p| p.key() == key);
        match (found.next(), found.next()) {
            (Some(p), None) => Ok(p.value().to_owned()),
            (None, _) => Err(format!("`{key}` is missing")),
            (Some(_), Some(_)) => Err(format!("`{key}` is repeated")),
        }
    };
    let meta = &t.metadata_props;
    let ext = &t.external_data;
    let lineage = unhex32(&get(meta, &format!("{P}source_lineage_digest"))?)
        .ok_or("the source lineage digest is not 64 hex digits")?;
    let device: u16 = get(meta, &format!("{P}device"))?
        .parse()
        .map_err(|_| "the device is not a number")?;
    let checksum = get(meta, K_CHECKSUM)?;
    let checksum = checksum
        .strip_prefix("xxh3-128:")
        .filter(|h| h.len() == 32)
        .and_then(|h| u128::from_str_radix(h, 16).ok())
        .ok_or("the payload checksum is not xxh3-128:<32 hex>")?;
    let length: u64 = get(ext, "length")?
        .parse()
        .map_err(|_| "the length is not a number")?;
    let location = get(ext, "location")?;
    if !CacheEntry::location_is_safe(&location) {
        return Err(format!(
            "payload location `{location}` is not a payload file of the cache directory"
        ));
    }
    if get(ext, "offset")? != "0" {
        return Err("the payload offset is not 0".into());
    }
    if t.data_type() != DataType::Uint8 as i32 || t.dims != [length as i64] {
        return Err("not a UINT8 vector of the payload's length".into());
    }
    let e = CacheEntry {
        key: EntryKey {
            lineage,
            layout: get(meta, &format!("{P}layout"))?,
            device,
        },
        source_lineage: get(meta, &format!("{P}source_lineage"))?,
        location,
        length,
        checksum,
        kernel_abi: get(meta, &format!("{P}kernel_abi"))?,
        format_version: get(meta, &format!("{P}format_version"))?,
        name: get(meta, K_NAME).unwrap_or_default(),
    };
    if t.name() != e.key.tensor_name() {
        return Err("the initializer's name does not match its metadata".into());
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        let mut m = Manifest {
            model_identity: "abc".into(),
            ..Manifest::default()
        };
        let e = CacheEntry {
            key: EntryKey {
                lineage: [7; 32],
                layout: "gemm-f32-avx2".into(),
                device: 0,
            },
            source_lineage: "w f32 [2, 2] sha256:00".into(),
            location: CacheEntry::location_for(0xabc),
            length: 128,
            checksum: 0xabc,
            kernel_abi: "abi".into(),
            format_version: FORMAT_VERSION.into(),
            name: "w:gemm".into(),
        };
        m.entries.insert(e.key.clone(), e);
        m.source_digests
            .insert("0123456789abcdef:w".into(), [1; 32]);
        m
    }

    #[test]
    fn manifests_round_trip() {
        let m = sample();
        let back = Manifest::parse(&m.to_bytes(), "x".as_ref()).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn garbage_is_structural_and_a_bad_entry_is_rejected_alone() {
        let p = std::path::Path::new("x");
        assert!(matches!(
            Manifest::parse(b"\xff\xff\xff garbage", p),
            Err(CacheError::Corrupt { .. })
        ));
        let mut proto = sample().to_proto();
        proto.metadata_props.retain(|p| p.key() != K_FORMAT);
        assert!(matches!(
            Manifest::parse(&proto.encode_to_vec(), p),
            Err(CacheError::Corrupt { .. })
        ));
        let mut proto = sample().to_proto();
        proto.graph.as_mut().unwrap().initializer[0].external_data[0] =
            prop("location", "../../etc/passwd");
        let m = Manifest::parse(&proto.encode_to_vec(), p).unwrap();
        assert!(m.entries.is_empty());
        assert_eq!(m.rejected.len(), 1);
        assert!(m.rejected[0].1.contains("../../etc/passwd"));
    }

    #[test]
    fn only_payload_names_are_safe_locations() {
        assert!(CacheEntry::location_is_safe(&CacheEntry::location_for(1)));
        for bad in [
            "../x.bin",
            "/etc/passwd",
            "payloads/../../x.bin",
            "payloads/0000000000000000000000000000000G.bin",
            "payloads/00.bin",
            "payloads\\00000000000000000000000000000000.bin",
        ] {
            assert!(!CacheEntry::location_is_safe(bad), "{bad}");
        }
    }
}
