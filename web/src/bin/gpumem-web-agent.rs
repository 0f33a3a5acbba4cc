//! Entry point of the agent & sheet page (`/agent/`): everything else is in the library.
fn main() {
    gpumem_web::start_agent();
}
