// A Core error is `core_client::Error`: its class is a Core class, and it
// cannot be asked for a GRAG one.
fn grag_class(error: &core_client::Error) -> grag_client::ErrorClass {
    error.class()
}

fn main() {
    let _ = grag_class;
}
