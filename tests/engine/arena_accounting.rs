//! Arena accounting: reservations against domain and global limits, the
//! life of preparation buffers, concurrent reservations and the report.

use onnx_prepared::arena::{
    ArenaError, BudgetLimits, Domain, MemoryBudget, PREPARATION_ALIGN, PreparationArena,
    PreparationBuffer, PreparedAllocation, PreparedArena, Reservation, UNLIMITED,
};
use onnx_prepared::sync::{Arc, Latch, thread};

const KIB: usize = 1024;

fn budget(global: usize, domain: Domain, limit: usize) -> MemoryBudget {
    MemoryBudget::new(
        BudgetLimits::unlimited()
            .with_global(global)
            .with_domain(domain, limit),
    )
}

fn assert_nothing_live(budget: &MemoryBudget) {
    for domain in Domain::ALL {
        assert_eq!(budget.live(domain), 0, "{domain}\n{}", budget.report());
    }
    assert_eq!(budget.total_live(), 0);
}

#[test]
fn fits_the_domain_but_not_the_global_limit() {
    let budget = budget(100, Domain::Prepared, 80);
    let io = budget.reserve(Domain::Io, 50).unwrap();
    let prepared = budget.reserve(Domain::Prepared, 40).unwrap();

    // 40 + 20 ≤ 80 in the domain, but 90 + 20 > 100 overall.
    let error = budget.reserve(Domain::Prepared, 20).unwrap_err();
    assert_eq!(
        error,
        ArenaError::OverBudget {
            domain: Domain::Prepared,
            requested: 20,
            live: 40,
            limit: 80,
            global_live: 90,
            global_limit: 100,
        }
    );
    assert!(error.is_over_budget());
    assert_eq!(budget.live(Domain::Prepared), 40);
    assert_eq!(budget.peak(Domain::Prepared), 40);
    assert_eq!(budget.total_live(), 90);

    drop(io);
    assert_eq!(budget.total_live(), 40);
    let again = budget.reserve(Domain::Prepared, 20).unwrap();
    assert_eq!(budget.live(Domain::Prepared), 60);
    drop((prepared, again));
    assert_nothing_live(&budget);
    assert_eq!(budget.total_peak(), 90);
}

#[test]
fn fits_the_global_but_not_the_domain_limit() {
    let budget = budget(1000, Domain::Preparation, 100);
    let held = budget.reserve(Domain::Preparation, 70).unwrap();
    let other = budget.reserve(Domain::Execution, 200).unwrap();

    let error = budget.reserve(Domain::Preparation, 31).unwrap_err();
    assert_eq!(
        error,
        ArenaError::OverBudget {
            domain: Domain::Preparation,
            requested: 31,
            live: 70,
            limit: 100,
            global_live: 270,
            global_limit: 1000,
        }
    );
    assert_eq!(budget.live(Domain::Preparation), 70);
    assert_eq!(budget.total_live(), 270);
    // Exactly at the limit is fine.
    let last = budget.reserve(Domain::Preparation, 30).unwrap();
    assert_eq!(budget.peak(Domain::Preparation), 100);
    drop((held, other, last));
    assert_nothing_live(&budget);
}

#[test]
fn grow_and_shrink_in_place() {
    let budget = budget(UNLIMITED, Domain::Execution, 100);
    let mut reservation = budget.reserve(Domain::Execution, 10).unwrap();
    reservation.grow(90).unwrap();
    assert_eq!(reservation.bytes(), 100);
    assert_eq!(budget.live(Domain::Execution), 100);

    let error = reservation.grow(1).unwrap_err();
    assert!(matches!(
        error,
        ArenaError::OverBudget {
            requested: 1,
            live: 100,
            limit: 100,
            ..
        }
    ));
    assert_eq!(reservation.bytes(), 100, "a refused grow changes nothing");
    assert_eq!(budget.live(Domain::Execution), 100);

    reservation.shrink(60);
    assert_eq!(reservation.bytes(), 40);
    assert_eq!(budget.live(Domain::Execution), 40);
    reservation.grow(60).unwrap();
    assert_eq!(budget.peak(Domain::Execution), 100);
    drop(reservation);
    assert_nothing_live(&budget);
}

#[test]
fn preparation_buffers_return_to_zero_after_the_producing_task() {
    let budget = budget(UNLIMITED, Domain::Preparation, 64 * KIB);
    let arena = PreparationArena::new(&budget);
    let prepared = PreparedArena::new(&budget);

    // A read task fills a source buffer, a prepack task packs it through
    // scratch into a resident object; the task completes and drops both.
    let object = {
        let mut source = arena.alloc_zeroed(40 * KIB + 3).unwrap();
        let mut scratch = arena.alloc_zeroed(8 * KIB).unwrap();
        for buffer in [&source, &scratch] {
            assert_eq!(buffer.as_ptr().addr() % PREPARATION_ALIGN, 0);
            assert!(buffer.iter().all(|&b| b == 0));
        }
        source.fill(0x5A);
        scratch[..16].copy_from_slice(&source[..16]);
        assert_eq!(budget.live(Domain::Preparation), 48 * KIB + 3);
        assert!(matches!(
            arena.alloc_zeroed(16 * KIB),
            Err(ArenaError::OverBudget { .. })
        ));
        prepared.admit(32 * KIB).unwrap()
    };
    assert_eq!(budget.live(Domain::Preparation), 0);
    assert_eq!(budget.peak(Domain::Preparation), 48 * KIB + 3);
    assert_eq!(budget.live(Domain::Prepared), 32 * KIB);

    drop(object); // eviction
    assert_nothing_live(&budget);
}

#[test]
fn concurrent_reservations_never_exceed_the_limits() {
    const LIMIT: usize = 1000;
    const GLOBAL: usize = 1500;
    const ROUNDS: usize = 100_000;
    let budget = MemoryBudget::new(
        BudgetLimits::unlimited()
            .with_global(GLOBAL)
            .with_domain(Domain::Prepared, LIMIT),
    );
    // Io is limited only by the global limit, so the threads also contend on
    // the global counter. The latch starts them together.
    let start = Arc::new(Latch::new());
    let workers: Vec<_> = [Domain::Prepared, Domain::Prepared, Domain::Io]
        .into_iter()
        .enumerate()
        .map(|(worker, domain)| {
            let budget = budget.clone();
            let start = Arc::clone(&start);
            thread::spawn(move || {
                start.wait();
                let mut held = Vec::new();
                let mut refused = 0usize;
                for round in 0..ROUNDS {
                    let bytes = 1 + (round * 37 + worker * 101) % 300;
                    match budget.reserve(domain, bytes) {
                        Ok(mut reservation) => {
                            if round % 5 == 0 && reservation.grow(bytes).is_err() {
                                refused += 1;
                            }
                            held.push(reservation);
                        }
                        Err(ArenaError::OverBudget { .. }) => refused += 1,
                        Err(other) => panic!("unexpected {other}"),
                    }
                    assert!(budget.live(Domain::Prepared) <= LIMIT);
                    assert!(budget.total_live() <= GLOBAL);
                    if !held.is_empty() && (held.len() > 3 || round % 7 == 0) {
                        drop(held.swap_remove(round % held.len()));
                    }
                }
                refused
            })
        })
        .collect();
    start.open();
    let refused: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(
        refused > 0,
        "the limits were never reached: the test is too weak"
    );
    assert!(budget.peak(Domain::Prepared) <= LIMIT);
    assert!(budget.total_peak() <= GLOBAL);
    assert!(budget.peak(Domain::Prepared) > LIMIT / 2);
    assert_nothing_live(&budget);
}

#[test]
fn report_shows_every_domain() {
    let budget = budget(1 << 20, Domain::Prepared, 1 << 19);
    let prepared = PreparedArena::new(&budget).admit(4096).unwrap();
    drop(budget.reserve(Domain::Execution, 1024).unwrap());
    let report = budget.report();
    assert_eq!(report.domain(Domain::Prepared).live, 4096);
    assert_eq!(report.domain(Domain::Prepared).limit, 1 << 19);
    assert_eq!(report.domain(Domain::Execution).peak, 1024);
    assert_eq!(report.domain(Domain::Execution).live, 0);
    assert_eq!(report.total_live, 4096);
    assert_eq!(report.global_limit, 1 << 20);
    let text = format!("{report}");
    assert!(text.contains("prepared") && text.contains("4096"), "{text}");
    assert!(format!("{budget:?}").contains("Prepared"));
    drop(prepared);
}

#[test]
fn handles_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<MemoryBudget>();
    send_sync::<Reservation>();
    send_sync::<PreparationArena>();
    send_sync::<PreparationBuffer>();
    send_sync::<PreparedArena>();
    send_sync::<PreparedAllocation>();
}
