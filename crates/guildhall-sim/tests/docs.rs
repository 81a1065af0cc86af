//! docs/simulation.md quotes the simulator's figures; this keeps it honest.
//! If it fails, run `cargo run --release -- sim report --seed 1` and paste
//! the output between the markers (the figures changed: say why in the
//! commit).

#[test]
fn simulation_doc_tables_are_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/simulation.md");
    let doc = std::fs::read_to_string(path).expect("docs/simulation.md");
    let begin = "<!-- BEGIN GENERATED: guildhall sim report --seed 1 -->\n";
    let end = "<!-- END GENERATED -->";
    let start = doc.find(begin).expect("begin marker") + begin.len();
    let stop = doc.find(end).expect("end marker");
    let generated = guildhall_sim::report::markdown(1).expect("report");
    assert_eq!(doc[start..stop], generated, "docs/simulation.md is stale");
}
