//! Entry point of the dimensioner page (`/`): everything else is in the library.
fn main() {
    gpumem_web::start();
}
