//! The scoped plan built from resolved fixtures: shared reads, distinct
//! prepacks per layout, the tiny-llm invocation chain, recipes, and no task
//! for an unused initializer.

use crate::support;

use std::collections::HashMap;

use crate::support::fixture;
use onnx_prepared::model::{Model, Requirement, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::{
    PackedEntries, PreparedExecutionPlan, PreparedKey, Recipe, RequirementId, TaskId, TaskKind,
    TaskScope,
};

fn plan(name: &str) -> PreparedExecutionPlan {
    let model = Model::open(fixture(name)).unwrap();
    let resolved = ResolvedModel::resolve(model, &ResolveOptions::default()).unwrap();
    PreparedExecutionPlan::build(resolved).unwrap()
}

fn tasks_of(plan: &PreparedExecutionPlan, kind: TaskKind) -> Vec<TaskId> {
    (0..plan.tasks().len() as u32)
        .map(TaskId)
        .filter(|t| plan.tasks().kind[t.0 as usize] == kind)
        .collect()
}

fn deps(plan: &PreparedExecutionPlan, t: TaskId) -> &[TaskId] {
    plan.tasks().deps.row(t.0 as usize)
}

#[test]
fn gemm_with_constant_b_reads_then_prepacks_then_executes() {
    for (name, flag) in [("gemm-transb0", "transB0"), ("gemm-transb1", "transB1")] {
        let p = plan(name);
        let t = p.tasks();
        let reads = tasks_of(&p, TaskKind::ReadSource);
        let packs = tasks_of(&p, TaskKind::Prepack);
        let execs = tasks_of(&p, TaskKind::Execute);
        // B is packed; the bias C is used as is (read and published).
        assert_eq!(packs.len(), 1, "{name}");
        assert_eq!(execs.len(), 1, "{name}");
        let pack = packs[0];
        let packed = t.publishes[pack.0 as usize].expect("prepack publishes");
        assert!(
            p.requirements().key[packed.0 as usize]
                .layout
                .contains(flag),
            "{name}"
        );
        let read_b = deps(&p, pack)[0];
        assert!(reads.contains(&read_b));
        assert_eq!(t.scope[read_b.0 as usize], TaskScope::Session);
        assert!(
            deps(&p, execs[0]).contains(&pack),
            "{name}: execute waits for the prepack"
        );
        assert_eq!(t.scope[execs[0].0 as usize], TaskScope::Invocation);
        assert!(t.requirements.row(execs[0].0 as usize).contains(&packed));
    }
}

#[test]
fn shared_weight_is_read_once_and_packed_per_layout() {
    let p = plan("gemm-shared-weight");
    let reads = tasks_of(&p, TaskKind::ReadSource);
    let packs = tasks_of(&p, TaskKind::Prepack);
    assert_eq!(reads.len(), 1, "one read of the shared weight");
    assert_eq!(packs.len(), 2, "one prepack per layout");
    for &pack in &packs {
        assert_eq!(deps(&p, pack), &[reads[0]]);
    }
    let keys: Vec<&PreparedKey> = packs
        .iter()
        .map(|t| &p.requirements().key[p.tasks().publishes[t.0 as usize].unwrap().0 as usize])
        .collect();
    assert_ne!(keys[0], keys[1]);
    assert_eq!(keys[0].lineage, keys[1].lineage, "same source lineage");
    assert_ne!(keys[0].layout, keys[1].layout);
}

#[test]
fn tiny_llm_has_four_packed_requirements_per_block_and_a_layer_chain() {
    let p = plan("tiny-llm");
    let blocks = 4;
    let names: Vec<&str> = p.steps().iter().map(|s| s.scope.as_str()).collect();
    let mut expected = vec!["embed".to_owned()];
    for b in 0..blocks {
        expected.push(format!("layer{b}.attn"));
        expected.push(format!("layer{b}.mlp"));
    }
    expected.extend(["final_norm".to_owned(), "lm_head".to_owned()]);
    assert_eq!(names, expected);
    // Each step waits for the previous one.
    for pair in p.steps().windows(2) {
        assert!(deps(&p, pair[1].task).contains(&pair[0].task));
    }
    let packed = |r: RequirementId| {
        p.requirements().key[r.0 as usize]
            .layout
            .starts_with("matmul-nbits-q4-v1-b32")
    };
    for b in 0..blocks {
        let needs: Vec<RequirementId> = p
            .steps()
            .iter()
            .filter(|s| s.scope.starts_with(&format!("layer{b}.")))
            .flat_map(|s| s.needs.iter_ones().map(|i| RequirementId(i as u32)))
            .filter(|&r| packed(r))
            .collect();
        assert_eq!(
            needs.len(),
            4,
            "block {b}: qkv, attention out, gate_up, down"
        );
    }
    let lm_head = p.steps().last().unwrap();
    assert_eq!(lm_head.needs.count_ones(), 1);
    // Every external weight is read exactly once.
    let reads = tasks_of(&p, TaskKind::ReadSource);
    let external = p
        .resolved()
        .model()
        .weights()
        .iter()
        .filter(|w| w.is_external())
        .count();
    assert_eq!(reads.len(), external);
    assert_eq!(p.resolved().manifest().len(), external);
}

#[test]
fn unused_initializer_gets_no_task_and_stays_out_of_the_manifest() {
    use onnx_prepared::model::proto::{Message, ModelProto, TypeProto, ValueInfoProto, type_proto};
    use support::{Init, write_data};
    let dir = support::tempdir();
    write_data(dir.path(), "w.bin", 64);
    let mut model = ModelProto::decode(
        &support::model_bytes(&[
            Init::external("used", &[8], &[("location", "w.bin")]),
            Init::external("unused", &[8], &[("location", "w.bin"), ("offset", "32")]),
        ])[..],
    )
    .unwrap();
    let graph = model.graph.as_mut().unwrap();
    // Keep only `used.out` as a graph output: the Identity reading `unused` is dead.
    let value = |name: &str| ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(1),
                shape: None,
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    graph.output = vec![value("used.out")];
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    let model = Model::open(&path).unwrap();
    let unused = model.weight_by_name("unused").unwrap().id();
    let used = model.weight_by_name("used").unwrap().id();
    let resolved = ResolvedModel::resolve(model, &ResolveOptions::default()).unwrap();
    assert!(!resolved.manifest().contains(unused));
    assert!(resolved.manifest().contains(used));
    let p = PreparedExecutionPlan::build(resolved).unwrap();
    assert!(p.tasks().reads.iter().flatten().all(|&w| w != unused));
    assert!(p.tasks().reads.iter().flatten().any(|&w| w == used));
}

#[test]
fn a_cached_packed_entry_replaces_read_and_prepack() {
    let model = Model::open(fixture("gemm-transb1")).unwrap();
    let resolved = ResolvedModel::resolve(model, &ResolveOptions::default()).unwrap();
    let packed = resolved
        .requirements()
        .iter()
        .find(|r| r.prepack.is_some())
        .unwrap();
    /// An in-memory cache: key → packed bytes.
    struct Cache(HashMap<PreparedKey, Vec<u8>>);
    impl PackedEntries for Cache {
        fn packed_bytes(&self, _: &ResolvedModel, r: &Requirement) -> Result<u64, String> {
            self.0
                .get(&r.key)
                .map(|b| b.len() as u64)
                .ok_or_else(|| "absent".into())
        }
    }
    let mut cache = Cache(HashMap::new());
    cache.0.insert(packed.key.clone(), vec![0; 1000]);
    let key = packed.key.clone();
    let p = PreparedExecutionPlan::build_with(resolved, &cache).unwrap();
    let r = p.requirements().key.iter().position(|k| *k == key).unwrap();
    assert_eq!(
        p.requirements().recipes[r],
        vec![
            Recipe::ReadPackedPayload { bytes: 1000 },
            Recipe::ReadSourceAndPrepack,
            Recipe::PortableFallback
        ],
        "cheapest first, the source recipe stays as the fallback"
    );
    assert_eq!(tasks_of(&p, TaskKind::ReadPacked).len(), 1);
    assert!(tasks_of(&p, TaskKind::Prepack).is_empty());
    // The bias is still read from the model; B is not.
    let b = p.resolved().model().weight_by_name("B").map(|w| w.id());
    assert!(p.tasks().reads.iter().flatten().all(|w| Some(*w) != b));
}

#[test]
fn plan_json_is_the_documented_interface() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_onnx-prepared"))
        .args([
            "plan",
            fixture("gemm-shared-weight").to_str().unwrap(),
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tasks = v["tasks"].as_array().unwrap();
    let kinds: Vec<&str> = tasks.iter().map(|t| t["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["read_source", "prepack", "prepack", "execute"]);
    for t in tasks {
        for field in [
            "id",
            "name",
            "scope",
            "kind",
            "resource",
            "deps",
            "publishes",
        ] {
            assert!(t.get(field).is_some(), "task field {field}");
        }
    }
    let req = &v["requirements"][0];
    for field in ["id", "key", "bit", "recipes", "bytes"] {
        assert!(req.get(field).is_some(), "requirement field {field}");
    }
    for field in ["lineage", "layout", "device"] {
        assert!(req["key"].get(field).is_some(), "key field {field}");
    }
    assert_eq!(v["steps"].as_array().unwrap().len(), 1);
}

#[test]
fn activation_last_use_points_at_the_last_reading_step() {
    let p = plan("tiny-llm");
    let last = p.activation_last_use();
    // Graph input 0 (`input_ids`) is read by the embedding step only.
    assert_eq!(last[0], 0);
    // Graph outputs are never released by the plan.
    for (_, op) in p.resolved().outputs() {
        if let onnx_prepared::model::Operand::Value(v) = op {
            assert_eq!(last[v.0 as usize], u32::MAX);
        }
    }
    // Past key of block 0 is read by layer0.attn (step 1) and nothing after.
    let past = p
        .resolved()
        .inputs()
        .iter()
        .position(|i| i.name == "past_key_0")
        .unwrap();
    assert_eq!(last[past], 1);
}

/// The scheduler's view of tiny-llm's plan gates every session task at the
/// first step that needs its output, reads no later than their prepacks,
/// and never gates an invocation task.
#[test]
fn tiny_llm_session_tasks_are_gated_by_first_use() {
    let plan = plan("tiny-llm");
    let graph = plan.task_graph_with_distances().unwrap();
    let tasks = plan.tasks();
    let mut layer_distance: HashMap<&str, u32> = HashMap::new();
    for t in 0..tasks.len() {
        let task = TaskId(t as u32);
        match tasks.scope[t] {
            TaskScope::Invocation => assert_eq!(graph.distance(task), None),
            TaskScope::Session => {
                let d = graph.distance(task).expect("session tasks are gated");
                if let Some(r) = tasks.publishes[t] {
                    assert_eq!(d, plan.requirements().prefetch_distance[r.0 as usize]);
                }
                for dep in tasks.dependents.row(t) {
                    if let Some(dd) = graph.distance(*dep) {
                        assert!(d <= dd, "{} after its prepack", tasks.name[t]);
                    }
                }
                for layer in ["layer0.", "layer3."] {
                    if tasks.name[t].contains(layer) {
                        let e = layer_distance.entry(layer).or_insert(d);
                        *e = (*e).min(d);
                    }
                }
            }
        }
    }
    assert!(
        layer_distance["layer0."] < layer_distance["layer3."],
        "{layer_distance:?}"
    );
}
