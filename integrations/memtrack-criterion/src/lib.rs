//! memtrack for criterion.
