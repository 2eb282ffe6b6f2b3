// A successful answer cannot be forged: only the pipeline builds a Reply.
use sdk_runtime::Reply;

fn main() {
    let _forge = Reply::new;
}
