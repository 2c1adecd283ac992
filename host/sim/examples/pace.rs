fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100);
    let t = std::time::Instant::now();
    let mut failed = 0;
    for seed in 0..n {
        if weft_sim::run(seed, weft_sim::Shape::default()).is_err() {
            failed += 1;
        }
    }
    let s = t.elapsed().as_secs_f64();
    println!(
        "{n} seeds in {s:.2}s: {:.1} seeds/s, {failed} failed",
        n as f64 / s
    );
}
