fn main() {
    let seed: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    let shape = weft_sim::Shape::default();
    match weft_sim::run(seed, shape) {
        Ok(p) => println!("seed {seed} passed: {:?}", p.tally),
        Err(f) => println!("{}", weft_sim::shrink(&f, shape)),
    }
}
