// A program whose delegates a user backend serves holds the backends
// (`&mut dyn Backend`, which need be neither Send nor Sync): it is neither,
// so it cannot leave the thread that made it (docs/soundness.md).
mod model {
    ptec_macros::include_pte!("../../../../tests/fixtures/tiny_delegate.pte");
}

fn send<T: Send>() {}
fn sync<T: Sync>() {}

fn main() {
    send::<model::TinyDelegate<'static>>();
    sync::<model::TinyDelegate<'static>>();
    send::<ptec_runtime::BackendRegistry<'static>>();
}
