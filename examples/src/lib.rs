//! memtrack's runnable examples live in `src/bin/`; each file says at its top what it
//! shows and the one command that runs it. This library part is empty on purpose.
