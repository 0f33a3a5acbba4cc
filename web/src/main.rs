//! Entry point of the page: everything else is in the library.
fn main() {
    gpumem_web::start();
}
