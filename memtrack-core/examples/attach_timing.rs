fn main() {
    let t0 = std::time::Instant::now();
    let t = memtrack::Tracker::new().unwrap();
    eprintln!("new: {:?}", t0.elapsed());
    let t1 = std::time::Instant::now();
    drop(t);
    eprintln!("drop: {:?}", t1.elapsed());
}
