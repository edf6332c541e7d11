//! Comparison, logic, unary/binary math and reduction operators.
//!
//! Lookup and attribute parsing are cold path; `execute` is hot path (one
//! type dispatch outside the element loops, strides in fixed arrays).
//!
//! Files: `compare` (Equal, Less, LessOrEqual, Greater, GreaterOrEqual,
//! And, Or, Xor, Not, IsNaN, IsInf), `unary` (Abs, Exp, Log, Cos, Sin,
//! Tanh, Erf, Gelu, Relu, Floor, Ceil, Round, Sign), `binary` (Max, Min,
//! Mod, Clip), `reduce` (ReduceSum, ReduceMean, ReduceMax, ReduceMin,
//! ReduceProd, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp,
//! ReduceSumSquare), `arg` (ArgMax, ArgMin), `activation` (LeakyRelu, Elu,
//! Selu, Celu, HardSigmoid, HardSwish, Softplus, Softsign, Mish,
//! ThresholdedRelu, Shrink, Swish), `prelu` (PRelu), `global_pool`
//! (GlobalAveragePool, GlobalMaxPool); `num` holds the numeric trait, the
//! type dispatch and the map helper, `fast` the vectorizable f32 functions.

#[macro_use]
mod num;
mod activation;
mod arg;
mod binary;
mod compare;
mod fast;
mod global_pool;
mod prelu;
mod reduce;
mod unary;

use compare::{CompareKind, LogicKind, PredicateKind};
use reduce::ReduceKind;
use unary::MathKind;

use crate::{KernelError, NodeSpec, Operator};

fn boxed<O: Operator + 'static>(
    op: Result<O, KernelError>,
) -> Result<Box<dyn Operator>, KernelError> {
    op.map(|o| Box::new(o) as Box<dyn Operator>)
}

/// The operator for `spec` if this family implements its op type (the
/// domain is `""` for ai.onnx).
pub fn lookup(spec: &NodeSpec<'_>) -> Option<Result<Box<dyn Operator>, KernelError>> {
    use compare::{Compare, Logic, Predicate};
    use unary::MathUnary;
    if spec.domain == "com.microsoft" && spec.op_type == "Gelu" {
        // ONNX Runtime's contrib Gelu: the exact (erf) form, no attributes.
        return Some(boxed(MathUnary::new(spec, MathKind::Gelu { tanh: false })));
    }
    if !spec.domain.is_empty() {
        return None;
    }
    let cmp = |k| boxed(Compare::new(spec, k));
    let logic = |k| boxed(Logic::new(spec, k));
    let pred = |k| boxed(Predicate::new(spec, k));
    let unary = |k| boxed(MathUnary::new(spec, k));
    let reduce = |k| boxed(reduce::Reduce::new(spec, k));
    Some(match spec.op_type {
        "Equal" => cmp(CompareKind::Equal),
        "Less" => cmp(CompareKind::Less),
        "LessOrEqual" => cmp(CompareKind::LessOrEqual),
        "Greater" => cmp(CompareKind::Greater),
        "GreaterOrEqual" => cmp(CompareKind::GreaterOrEqual),
        "And" => logic(LogicKind::And),
        "Or" => logic(LogicKind::Or),
        "Xor" => logic(LogicKind::Xor),
        "Not" => pred(PredicateKind::Not),
        "IsNaN" => pred(PredicateKind::IsNaN),
        "IsInf" => pred(PredicateKind::IsInf {
            positive: true,
            negative: true,
        }),
        "Max" => boxed(binary::Extremum::new(spec, true)),
        "Min" => boxed(binary::Extremum::new(spec, false)),
        "Mod" => boxed(binary::Mod::new(spec)),
        "Clip" => boxed(binary::Clip::new(spec)),
        "Abs" => unary(MathKind::Abs),
        "Exp" => unary(MathKind::Exp),
        "Log" => unary(MathKind::Log),
        "Cos" => unary(MathKind::Cos),
        "Sin" => unary(MathKind::Sin),
        "Tanh" => unary(MathKind::Tanh),
        "Erf" => unary(MathKind::Erf),
        "Gelu" => unary(MathKind::Gelu { tanh: false }),
        "Relu" => unary(MathKind::Relu),
        "Floor" => unary(MathKind::Floor),
        "Ceil" => unary(MathKind::Ceil),
        "Round" => unary(MathKind::Round),
        "Sign" => unary(MathKind::Sign),
        "ReduceSum" => reduce(ReduceKind::Sum),
        "ReduceMean" => reduce(ReduceKind::Mean),
        "ReduceMax" => reduce(ReduceKind::Max),
        "ReduceMin" => reduce(ReduceKind::Min),
        "ReduceProd" => reduce(ReduceKind::Prod),
        "ReduceL1" => reduce(ReduceKind::L1),
        "ReduceL2" => reduce(ReduceKind::L2),
        "ReduceLogSum" => reduce(ReduceKind::LogSum),
        "ReduceLogSumExp" => reduce(ReduceKind::LogSumExp),
        "ReduceSumSquare" => reduce(ReduceKind::SumSquare),
        "PRelu" => boxed(prelu::PRelu::new(spec)),
        "ArgMax" => boxed(arg::ArgExtremum::new(spec, true)),
        "ArgMin" => boxed(arg::ArgExtremum::new(spec, false)),
        "GlobalAveragePool" => boxed(global_pool::GlobalPool::new(spec, false)),
        "GlobalMaxPool" => boxed(global_pool::GlobalPool::new(spec, true)),
        other => {
            let a = activation::Activation::parse(spec, other)?;
            boxed(a.map(activation::ActivationOp))
        }
    })
}
