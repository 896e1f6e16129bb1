//! memtrack for divan.
