#[test]
fn smoke_box() {
    let mut t = memtrack::Tracker::new().unwrap();
    t.start().unwrap();
    let b = Box::new([0u8; 1000]);
    std::hint::black_box(&b);
    drop(b);
    t.stop().unwrap();
    let s = t.collect().unwrap();
    eprintln!("{s:#?}");
    eprintln!("{:#?}", t.probes());
}
