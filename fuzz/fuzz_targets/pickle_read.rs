//! The snapshot pickle reader on arbitrary bytes: never a panic; an error names a byte offset
//! inside the input; whatever it accepts, the writer writes back and the reader reads again
//! as an equal value (sharing included: `Value`'s equality follows `Rc`s).
#![no_main]
use libfuzzer_sys::fuzz_target;
use vramscope::pickle::{read, write, Limits, PickleError, Value};

/// The one call site of the reader (adapt here when its budget parameters change). The
/// limits are smaller than the defaults so that one input stays within the fuzzer's RSS limit.
fn read_bounded(data: &[u8]) -> Result<Value, PickleError> {
    read(data, &Limits { max_depth: 64, max_items: 1 << 20, max_bytes: 16 << 20, ..Limits::default() })
}

fuzz_target!(|data: &[u8]| {
    match read_bounded(data) {
        Err(e) => assert!(e.offset <= data.len(), "error offset {} past the input's {} bytes: {e}", e.offset, data.len()),
        Ok(v) => {
            let bytes = write(&v);
            let back = read_bounded(&bytes).unwrap_or_else(|e| panic!("our own pickle of an accepted value is refused: {e}"));
            assert!(back == v, "write → read changed the value");
            // Writing is deterministic, so a second round gives the same bytes.
            assert!(write(&back) == bytes, "write(read(write(v))) != write(v)");
        }
    }
});
