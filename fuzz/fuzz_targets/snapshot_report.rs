//! What `vramscope analyze` and `view` do with an untrusted snapshot file: read it, analyse
//! it, and render the HTML report. Never a panic; analysis and report agree on whether the
//! snapshot is usable; a usable one gives a self-consistent analysis and a complete page.
//! `analyze`'s streaming reader (`pickle::condense`, replayed from its records) gives the
//! same report as the tree whenever both read the snapshot.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vramscope::analyse::budget::Budget;
use vramscope::analyse::snapshot::{analyse_replay, analyse_within, replay_condensed, SnapshotReport};
use vramscope::pickle::condense::{read_condensed, read_condensed_general, Refused};
use vramscope::export::html::{report_within, Source};
use vramscope::pickle::{read, Value};

/// The call sites of the three stages, with bounded budgets (adapt here when the stages gain
/// budget parameters).
fn budget() -> Budget {
    Budget { depth: 64, items: 1 << 18, bytes_objects: 1 << 20, output_bytes: 64 << 20, ..Budget::default() }
}
fn read_bounded(data: &[u8]) -> Option<Value> {
    read(data, &budget().pickle_limits()).ok()
}
fn analyse_bounded(snap: &Value) -> Result<SnapshotReport, String> {
    analyse_within(snap, None, 100.0, 10, &budget())
}
fn report_bounded(snap: &Value) -> Result<String, String> {
    let page = report_within(&[Source { name: "fuzz".into(), snapshot: snap, device: None, stats: None }], None, &budget())?;
    String::from_utf8(page).map_err(|e| format!("page is not UTF-8: {e}"))
}

/// `analyze`'s path: None when the streaming reader hands the bytes back to the tree reader
/// or refuses them.
fn streamed(data: &[u8]) -> Option<Result<SnapshotReport, String>> {
    let b = budget();
    let c = read_condensed(data, &b.pickle_limits(), b.trace_entries, b.frames).ok()?;
    Some(replay_condensed(c, None, &b).and_then(|rp| analyse_replay(&rp, 100.0, 10)))
}

/// The streaming reader's fast path for trace entries against its general loop: the same
/// report or the same error, unless the fast path hands the bytes back to the tree reader.
fn fast_path_agrees(data: &[u8]) {
    let b = budget();
    let outcome = |r: Result<vramscope::pickle::condense::Condensed, Refused>| match r {
        Ok(c) => Some(replay_condensed(c, None, &b).and_then(|rp| analyse_replay(&rp, 100.0, 10)).map(|r| serde_json::to_string(&r).unwrap())),
        Err(Refused::Bail) => None,
        Err(Refused::File(e)) => Some(Err(e.to_string())),
    };
    let Some(fast) = outcome(read_condensed(data, &b.pickle_limits(), b.trace_entries, b.frames)) else { return };
    let general = outcome(read_condensed_general(data, &b.pickle_limits(), b.trace_entries, b.frames));
    assert!(general.as_ref() == Some(&fast), "the fast path gives {fast:?}, the general loop {general:?}");
}

fuzz_target!(|data: &[u8]| {
    fast_path_agrees(data);
    let streamed = streamed(data);
    let Some(snap) = read_bounded(data) else { return };
    let analysed = analyse_bounded(&snap);
    match (&analysed, &streamed) {
        (Ok(a), Some(Ok(s))) => {
            let (a, s) = (serde_json::to_string(a).unwrap(), serde_json::to_string(s).unwrap());
            assert!(a == s, "the streaming reader's report differs:\n{a}\n{s}");
        }
        (Ok(_), Some(Err(e))) => panic!("the streaming reader's replay refuses what the tree's accepts: {e}"),
        _ => {}
    }
    let page = report_bounded(&snap);
    // The page alone has an output budget: a report refused for its size is not a disagreement.
    let page_over_budget = page.as_ref().is_err_and(|e| e.contains("--max-output-bytes"));
    assert!(analysed.is_ok() == page.is_ok() || page_over_budget, "analyse: {:?} / report: {:?}", analysed.as_ref().err(), page.as_ref().err());
    if let (Ok(r), Ok(page)) = (analysed, page) {
        assert!(r.peak_at.is_none_or(|i| i < r.events), "peak at entry {:?} of {}", r.peak_at, r.events);
        assert!(r.ooms.iter().all(|o| o.at < r.events));
        assert!(r.largest.len() <= 10);
        let at_peak: u128 = r.live_at_peak_by_category.iter().map(|(_, b)| *b as u128).sum();
        assert_eq!(at_peak, r.peak_active_bytes as u128, "live at the peak by category does not add up to the peak");
        assert!(page.ends_with("</html>\n") && page.contains("id=\"vramscope-data\""));
    }
});
