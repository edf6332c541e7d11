//! Phase 3 for a convolution chain ([`crate::model::conv_chain`]), at its
//! last node: one fused operator when every check passes.

use onnx_prepared_kernels::ops::conv::{self, ConvActivation, ConvFusion};
use onnx_prepared_kernels::{Attributes, ElementType, InputInfo, NodeSpec, Operator};
use onnx_prepared_proto::NodeProto;

use super::super::probe::{Known, ProbeView};
use super::{Resolver, node_name};
use crate::model::NodeAttributes;
use crate::model::conv_chain::{ActKind, ConvChain};

impl Resolver<'_> {
    /// The fused operator of `chain`, its name (the Conv's) and its input
    /// names; `None` when the chain does not qualify here: the input is
    /// not a probed f32 value, a normalization parameter or a Clip bound
    /// is not a constant, the residual addend is not a probed value of the
    /// output's shape with every dim past the batch above 1 (so a
    /// broadcast one is never taken for it), or the fused operator refuses
    /// the probed shapes. The caller then resolves the nodes one by one.
    pub(super) fn fuse_chain(
        &self,
        chain: &ConvChain,
    ) -> Option<(String, Box<dyn Operator>, Vec<String>)> {
        let nodes = &self.model.graph().node;
        let conv_node = &nodes[chain.nodes[0]];
        let probed_f32 = |name: &str| match self.known.get(name) {
            Some(Known::Value(id, ElementType::F32, shape)) if !self.unprobed.contains(id) => {
                Some(shape.clone())
            }
            _ => None,
        };
        let constant = |name: &str| {
            matches!(
                self.known.get(name),
                Some(Known::Inline(_) | Known::Weight(_))
            )
        };
        if conv_node.input.len() > 3 {
            return None;
        }
        let x = conv_node.input.first()?;
        probed_f32(x)?;
        let mut inputs = vec![
            x.clone(),
            conv_node.input.get(1)?.clone(),
            conv_node.input.get(2).cloned().unwrap_or_default(),
        ];
        let mut fusion = ConvFusion::default();
        if let Some(b) = chain.batch_norm {
            let bn = &nodes[b];
            let params = bn.input.get(1..5)?;
            if !params.iter().all(|p| constant(p)) {
                return None;
            }
            inputs.extend(params.iter().cloned());
            let attrs = NodeAttributes::new(bn).ok()?;
            fusion.batch_norm = Some(attrs.float("epsilon").ok()?.unwrap_or(1e-5));
        }
        if let Some(r) = &chain.residual {
            let shape = probed_f32(r)?;
            if shape.get(1..)?.iter().any(|&d| d <= 1) {
                return None;
            }
            inputs.push(r.clone());
            fusion.residual = true;
        }
        if let Some((kind, holder)) = chain.activation {
            fusion.activation = self.chain_activation(kind, &nodes[holder])?;
        }
        let attributes = NodeAttributes::new(conv_node).ok()?;
        let spec = NodeSpec {
            domain: "",
            op_type: "Conv",
            opset: self.model.opset_version("")?,
            attributes: &attributes,
            inputs: conv_node.input.len(),
            outputs: conv_node.output.len(),
        };
        let op = conv::fused(&spec, fusion, self.options.cpu).ok()?;
        let view = view!(self);
        let mut infos: Vec<Option<InputInfo<'_>>> = Vec::with_capacity(inputs.len());
        for name in &inputs {
            infos.push(if name.is_empty() {
                None
            } else {
                Some(view.info(self.known.get(name)?)?)
            });
        }
        op.infer_checked(&infos).ok()?;
        Some((node_name(chain.nodes[0], conv_node), op, inputs))
    }

    /// The activation with its parameters: attributes with ONNX's
    /// defaults, or a Clip's bounds from its constant inputs (opset 11 on)
    /// or attributes (before).
    fn chain_activation(&self, kind: ActKind, node: &NodeProto) -> Option<ConvActivation> {
        let attrs = NodeAttributes::new(node).ok()?;
        let float = |name: &str, default: f32| attrs.float(name).ok().map(|v| v.unwrap_or(default));
        Some(match kind {
            ActKind::Relu => ConvActivation::Relu,
            ActKind::HardSwish => ConvActivation::HardSwish,
            ActKind::Sigmoid => ConvActivation::Sigmoid,
            ActKind::Silu => ConvActivation::Silu,
            ActKind::LeakyRelu => ConvActivation::LeakyRelu {
                alpha: float("alpha", 0.01)?,
            },
            ActKind::HardSigmoid => ConvActivation::HardSigmoid {
                alpha: float("alpha", 0.2)?,
                beta: float("beta", 0.5)?,
            },
            ActKind::MulHardSigmoid => ConvActivation::MulHardSigmoid {
                alpha: float("alpha", 0.2)?,
                beta: float("beta", 0.5)?,
            },
            ActKind::Clip => {
                let bound = |i: usize, attr: &str, default: f32| -> Option<f32> {
                    match node.input.get(i).filter(|n| !n.is_empty()) {
                        Some(name) => match self.known.get(name)? {
                            Known::Inline(id) => {
                                let t = &self.inline[id.0 as usize];
                                match (t.shape(), t.as_f32()) {
                                    ([], Some(&[v])) | ([1], Some(&[v])) => Some(v),
                                    _ => None,
                                }
                            }
                            _ => None,
                        },
                        None => float(attr, default),
                    }
                };
                ConvActivation::Clip {
                    min: bound(1, "min", f32::NEG_INFINITY)?,
                    max: bound(2, "max", f32::INFINITY)?,
                }
            }
        })
    }
}
