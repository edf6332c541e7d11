//! `inspect`: a report of a model's structure and weights built from
//! metadata alone (cold path). Reads no payload byte.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use super::proto::ValueInfoProto;
use super::proto::tensor_shape_proto::dimension::Value as DimValue;
use super::proto::type_proto::Value as TypeValue;
use super::{Checksum, Model, WeightSource, onnx_type_name};

/// What `onnx-prepared inspect` prints.
#[derive(Debug, Clone, Serialize)]
pub struct InspectReport {
    /// The model file.
    pub path: String,
    /// `ir_version`.
    pub ir_version: i64,
    /// `producer_name`.
    pub producer: String,
    /// `(domain, version)`; the default domain is `ai.onnx`.
    pub opsets: Vec<(String, i64)>,
    /// Graph inputs that are not initializers.
    pub inputs: Vec<ValueReport>,
    /// Graph outputs.
    pub outputs: Vec<ValueReport>,
    /// Node count per `domain::op_type` (`op_type` alone for the default domain).
    pub ops: BTreeMap<String, usize>,
    /// Every initializer.
    pub weights: Vec<WeightReport>,
    /// Sums over the weights.
    pub totals: Totals,
}

/// A graph input or output.
#[derive(Debug, Clone, Serialize)]
pub struct ValueReport {
    /// Its name.
    pub name: String,
    /// Element type (ONNX name), or the kind of non-tensor type.
    pub element_type: String,
    /// Dimensions: numbers, symbolic names, or `?` when unknown.
    pub shape: Option<Vec<String>>,
}

/// One initializer.
#[derive(Debug, Clone, Serialize)]
pub struct WeightReport {
    /// Its name.
    pub name: String,
    /// Element type (`f32`, `u8`, ...).
    pub element_type: &'static str,
    /// Dimensions.
    pub dims: Vec<u64>,
    /// Payload bytes.
    pub bytes: u64,
    /// `embedded` or `external`.
    pub storage: &'static str,
    /// External file location as written, when external.
    pub location: Option<String>,
    /// Byte offset in the external file, when external.
    pub offset: Option<u64>,
    /// `sha256`, `file-sha1` or absent.
    pub checksum: Option<&'static str>,
}

/// Sums over the weights.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// Number of initializers.
    pub weights: usize,
    /// Number of nodes.
    pub nodes: usize,
    /// Bytes embedded in the `.onnx` file.
    pub embedded_bytes: u64,
    /// Bytes in external data files.
    pub external_bytes: u64,
    /// Number of distinct external data files.
    pub external_files: usize,
    /// External weights that carry a `sha256:` digest.
    pub external_with_sha256: usize,
}

fn value_report(v: &ValueInfoProto) -> ValueReport {
    let name = v.name.clone().unwrap_or_default();
    match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(TypeValue::TensorType(t)) => ValueReport {
            name,
            element_type: onnx_type_name(t.elem_type.unwrap_or_default()),
            shape: t.shape.as_ref().map(|s| {
                s.dim
                    .iter()
                    .map(|d| match &d.value {
                        Some(DimValue::DimValue(n)) => n.to_string(),
                        Some(DimValue::DimParam(p)) => p.clone(),
                        None => "?".to_owned(),
                    })
                    .collect()
            }),
        },
        Some(other) => ValueReport {
            name,
            element_type: format!("{other:?}")
                .split('(')
                .next()
                .unwrap_or_default()
                .to_owned(),
            shape: None,
        },
        None => ValueReport {
            name,
            element_type: "unknown".to_owned(),
            shape: None,
        },
    }
}

impl InspectReport {
    /// Builds the report from `model`'s metadata.
    pub fn new(model: &Model) -> Self {
        let graph = model.graph();
        let mut ops = BTreeMap::new();
        for node in &graph.node {
            let op = node.op_type.as_deref().unwrap_or_default();
            let key = match node.domain.as_deref() {
                None | Some("") | Some("ai.onnx") => op.to_owned(),
                Some(d) => format!("{d}::{op}"),
            };
            *ops.entry(key).or_insert(0) += 1;
        }
        let mut totals = Totals {
            weights: model.weights().len(),
            nodes: graph.node.len(),
            external_files: model.external_files().len(),
            ..Totals::default()
        };
        let weights = model
            .weights()
            .iter()
            .map(|w| {
                let (storage, location, offset) = match w.source() {
                    WeightSource::Embedded { .. } => {
                        totals.embedded_bytes += w.byte_len();
                        ("embedded", None, None)
                    }
                    WeightSource::External { file, offset, .. } => {
                        totals.external_bytes += w.byte_len();
                        let loc = model.external_files()[file.index()].location().to_owned();
                        ("external", Some(loc), Some(*offset))
                    }
                };
                let checksum = w.checksum().map(|c| match c {
                    Checksum::Sha256(_) => "sha256",
                    Checksum::WholeFileSha1(_) => "file-sha1",
                });
                if storage == "external" && checksum == Some("sha256") {
                    totals.external_with_sha256 += 1;
                }
                WeightReport {
                    name: w.name().to_owned(),
                    element_type: w.element_type().name(),
                    dims: w.dims().to_vec(),
                    bytes: w.byte_len(),
                    storage,
                    location,
                    offset,
                    checksum,
                }
            })
            .collect();
        let initializer_names: std::collections::HashSet<&str> =
            model.weights().iter().map(|w| w.name()).collect();
        Self {
            path: model.path().display().to_string(),
            ir_version: model.proto().ir_version.unwrap_or_default(),
            producer: model.proto().producer_name.clone().unwrap_or_default(),
            opsets: model
                .opset_imports()
                .map(|(d, v)| (if d.is_empty() { "ai.onnx" } else { d }.to_owned(), v))
                .collect(),
            inputs: graph
                .input
                .iter()
                .filter(|v| !initializer_names.contains(v.name.as_deref().unwrap_or_default()))
                .map(value_report)
                .collect(),
            outputs: graph.output.iter().map(value_report).collect(),
            ops,
            weights,
            totals,
        }
    }

    /// The human-readable form.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let shape = |v: &ValueReport| match &v.shape {
            Some(d) => format!("[{}]", d.join(", ")),
            None => "(no shape)".to_owned(),
        };
        let _ = writeln!(s, "model      {}", self.path);
        let _ = writeln!(
            s,
            "ir_version {}  producer {}",
            self.ir_version, self.producer
        );
        let opsets: Vec<String> = self
            .opsets
            .iter()
            .map(|(d, v)| format!("{d} {v}"))
            .collect();
        let _ = writeln!(s, "opsets     {}", opsets.join(", "));
        let _ = writeln!(s, "\ninputs");
        for v in &self.inputs {
            let _ = writeln!(s, "  {:<24} {:<8} {}", v.name, v.element_type, shape(v));
        }
        let _ = writeln!(s, "outputs");
        for v in &self.outputs {
            let _ = writeln!(s, "  {:<24} {:<8} {}", v.name, v.element_type, shape(v));
        }
        let _ = writeln!(s, "\nops ({} nodes)", self.totals.nodes);
        for (op, n) in &self.ops {
            let _ = writeln!(s, "  {op:<36} {n:>5}");
        }
        let _ = writeln!(s, "\nweights");
        let _ = writeln!(
            s,
            "  {:<28} {:<5} {:<18} {:>10}  {:<9} {:<8} location@offset",
            "name", "type", "dims", "bytes", "storage", "checksum"
        );
        for w in &self.weights {
            let dims = format!("{:?}", w.dims);
            let at = match (&w.location, w.offset) {
                (Some(l), Some(o)) => format!("{l}@{o}"),
                _ => String::new(),
            };
            let _ = writeln!(
                s,
                "  {:<28} {:<5} {:<18} {:>10}  {:<9} {:<8} {}",
                w.name,
                w.element_type,
                dims,
                w.bytes,
                w.storage,
                w.checksum.unwrap_or("-"),
                at
            );
        }
        let t = &self.totals;
        let _ = writeln!(
            s,
            "\ntotals     {} weights: {} bytes embedded, {} bytes external in {} file(s); {} of {} external weights carry a sha256 digest",
            t.weights,
            t.embedded_bytes,
            t.external_bytes,
            t.external_files,
            t.external_with_sha256,
            self.weights
                .iter()
                .filter(|w| w.storage == "external")
                .count()
        );
        s
    }
}
