//! A tenant's listing of runs reads its index of runs: its own runs,
//! newest first, page by page, and a deleted run gone from it. On redb, a
//! run row of another tenant that does not decode leaves the listing
//! whole (it is never read), and a file made before the index gets it on
//! opening.

use weft_store::RunState::Succeeded;
use weft_store::{RunFilter, RunRecord, Store, Write};

use crate::common::{def, run};
use crate::table::{open, put};

/// Run `id` of workflow `workflow`.
fn of(id: &str, workflow: &str) -> RunRecord {
    let mut run = run(id);
    run.workflow = workflow.to_owned();
    run
}

fn create(s: &dyn Store, id: &str, workflow: &str) {
    put(
        s,
        Write::create_run(&of(id, workflow), &def("d0", "id: wf"), Vec::new()),
    );
}

fn listed(s: &dyn Store, filter: &RunFilter, limit: usize) -> Vec<String> {
    s.runs(filter, limit)
        .unwrap()
        .into_iter()
        .map(|run| run.id)
        .collect()
}

fn tenant(name: &str) -> RunFilter {
    RunFilter {
        tenant: Some(name.to_owned()),
        ..RunFilter::default()
    }
}

#[test]
fn a_tenants_listing_holds_its_runs_newest_first_and_no_other() {
    let (_dir, s) = open();
    let s = &*s;
    // Ids sort as the runs' ages: "r1" is the oldest.
    for (id, workflow) in [
        ("r1", "acme:wf"),
        ("r2", "wf"),
        ("r3", "acme:other"),
        ("r4", "acmes:wf"),
        ("r5", "acme:wf"),
        ("r6", "zeta:wf"),
    ] {
        create(s, id, workflow);
    }
    assert_eq!(listed(s, &tenant("acme"), 10), ["r5", "r3", "r1"]);
    assert_eq!(listed(s, &tenant("default"), 10), ["r2"]);
    assert_eq!(listed(s, &tenant("acmes"), 10), ["r4"]);
    assert!(listed(s, &tenant("nobody"), 10).is_empty());
    // Pages: the next one starts before the last id seen.
    assert_eq!(listed(s, &tenant("acme"), 2), ["r5", "r3"]);
    let next = RunFilter {
        before: Some("r3".to_owned()),
        ..tenant("acme")
    };
    assert_eq!(listed(s, &next, 2), ["r1"]);
    // A workflow names its tenant.
    let workflow = RunFilter {
        workflow: Some("acme:wf".to_owned()),
        ..RunFilter::default()
    };
    assert_eq!(listed(s, &workflow, 10), ["r5", "r1"]);
    // Every tenant's runs, with no filter.
    assert_eq!(
        listed(s, &RunFilter::default(), 10),
        ["r6", "r5", "r4", "r3", "r2", "r1"]
    );

    // A deleted run leaves its tenant's listing.
    let mut ended = of("r3", "acme:other");
    ended.state = Succeeded;
    put(s, Write::update_run(&ended));
    put(s, Write::DeleteRun("r3".to_owned()));
    assert_eq!(listed(s, &tenant("acme"), 10), ["r5", "r1"]);
}

#[test]
fn a_listing_by_state_name_keeps_paused_runs_apart() {
    let (_dir, s) = open();
    let s = &*s;
    create(s, "r1", "wf");
    let mut paused = of("r2", "wf");
    paused.paused = Some(weft_store::PauseMark {
        at: paused.created_at,
        actor: "cli".to_owned(),
    });
    paused.suspended = true;
    put(
        s,
        Write::create_run(&paused, &def("d0", "id: wf"), Vec::new()),
    );
    let named = |name: &str| RunFilter::default().state_named(name).unwrap();
    assert_eq!(listed(s, &named("paused"), 10), ["r2"]);
    assert_eq!(listed(s, &named("running"), 10), ["r2", "r1"]);
    assert!(listed(s, &named("failed"), 10).is_empty());
    let refused = RunFilter::default().state_named("asleep").unwrap_err();
    assert!(refused.contains("cancelled, or paused)"), "{refused}");
}
