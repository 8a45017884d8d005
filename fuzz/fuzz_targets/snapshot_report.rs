//! What `vramscope analyze` and `view` do with an untrusted snapshot file: read it, analyse
//! it, and render the HTML report. Never a panic; analysis and report agree on whether the
//! snapshot is usable; a usable one gives a self-consistent analysis and a complete page.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vramscope::analyse::budget::Budget;
use vramscope::analyse::snapshot::{analyse_within, SnapshotReport};
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

fuzz_target!(|data: &[u8]| {
    let Some(snap) = read_bounded(data) else { return };
    let analysed = analyse_bounded(&snap);
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
