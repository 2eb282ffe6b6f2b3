// The pipeline (the one place headers are assembled) is private to the runtime.
use sdk_runtime::pipeline::Attempt;

fn main() {
    let _ = std::mem::size_of::<Attempt>();
}
