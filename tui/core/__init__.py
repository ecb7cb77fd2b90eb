"""Pure domain code: no Textual, no Rich. Everything a headless CLI and the tests need."""
