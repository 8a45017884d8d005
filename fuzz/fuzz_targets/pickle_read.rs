//! The snapshot pickle reader on arbitrary bytes: never a panic; an error names a byte offset
//! inside the input; whatever it accepts, the writer writes back and the reader reads again
//! as an equal value (sharing included: `Value`'s equality follows `Rc`s). The streaming
//! reader (`pickle::condense`) on the same bytes: never a panic, an error inside the input,
//! and when it condenses a pickle the tree reader refuses, only for a budget it counts
//! differently (it holds less).
#![no_main]
use libfuzzer_sys::fuzz_target;
use vramscope::pickle::condense::{read_condensed, Refused};
use vramscope::pickle::{read, write, FileError, Limits, PickleError, Value};

/// The one call site of the reader (adapt here when its budget parameters change). The
/// limits are smaller than the defaults so that one input stays within the fuzzer's RSS limit.
fn read_bounded(data: &[u8]) -> Result<Value, PickleError> {
    read(data, &Limits { max_depth: 64, max_items: 1 << 20, max_bytes: 16 << 20, ..Limits::default() })
}

fn limits() -> Limits {
    Limits { max_depth: 64, max_items: 1 << 20, max_bytes: 16 << 20, ..Limits::default() }
}

fuzz_target!(|data: &[u8]| {
    let tree = read_bounded(data);
    match read_condensed(data, &limits(), 1 << 20, 1 << 20) {
        Err(Refused::File(FileError::Pickle(e))) => assert!(e.offset <= data.len(), "streaming: error offset {} past the input's {} bytes: {e}", e.offset, data.len()),
        Err(Refused::File(FileError::Io(m))) => panic!("streaming: I/O error on bytes in memory: {m}"),
        Ok(_) => {
            if let Err(e) = &tree {
                assert!(e.message.contains("--max-items") || e.message.contains("--max-containers"), "streaming reader condensed what the tree reader refuses: {e}");
            }
        }
        Err(Refused::Bail) => {}
    }
    match tree {
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
