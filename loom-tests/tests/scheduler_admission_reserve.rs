//! Loom model of admission's critical reserve under competing submissions:
//! two workers of two prefetch submissions and one critical task ask one
//! `Admission` for bytes at once. A global limit of 100 keeps 25 % for
//! critical work, so the two prefetch tasks of 50 bytes never hold at once
//! (100 would fit the budget, not the 75 prefetch may hold), at least one
//! of them is admitted (a refusal is only ever caused by the other's
//! hold), and the critical task of 50 is admitted in every interleaving:
//! speculative work never takes the room a critical one needs. Afterwards
//! every counter is back to zero (a refused attempt's partial holds are
//! undone).
#![cfg(loom)]

use loom_tests::model;

use onnx_prepared::arena::{BudgetLimits, Domain, MemoryBudget};
use onnx_prepared::plan::Priority;
use onnx_prepared::scheduler::{Admission, Lane, Refusal};
use onnx_prepared::sync::{Arc, AtomicUsize, Ordering, thread};

#[test]
fn prefetch_never_takes_the_critical_reserve() {
    model(|| {
        let budget = MemoryBudget::new(BudgetLimits::unlimited().with_global(100));
        let admission = Arc::new(Admission::new(budget.clone()));
        let holding = Arc::new(AtomicUsize::new(0));
        let prefetch = |lane| {
            let (admission, holding) = (admission.clone(), holding.clone());
            thread::spawn(move || {
                match admission.try_admit(lane, Priority::Prefetch, Domain::Preparation, 50) {
                    Ok(permit) => {
                        let before = holding.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(before, 0, "two prefetch tasks hold at once");
                        holding.fetch_sub(1, Ordering::SeqCst);
                        drop(permit);
                        true
                    }
                    Err(Refusal::Busy) => false,
                    Err(Refusal::Never(why)) => panic!("50 bytes fit the prefetch share: {why}"),
                }
            })
        };
        let (a, b) = (prefetch(Lane::Io), prefetch(Lane::Cpu));
        let critical = admission
            .try_admit(Lane::Cpu, Priority::Critical, Domain::Preparation, 50)
            .expect("the reserve keeps room for critical work");
        assert!(budget.total_live() <= 100);
        drop(critical);
        let admitted = [a.join().unwrap(), b.join().unwrap()];
        assert!(admitted.contains(&true), "a refusal needs the other's hold");
        assert_eq!(budget.total_live(), 0);
        // Nothing is left counted: the whole prefetch share is free again.
        let all = admission
            .try_admit(Lane::Io, Priority::Prefetch, Domain::Preparation, 75)
            .expect("the prefetch share is whole again");
        drop(all);
    });
}
