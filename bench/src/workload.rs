//! Workload generators: Iometer-style access specifications (read share,
//! block-size mix, random share) over a region, with uniform or Zipf-skewed
//! random offsets, and per-worker stream hints like an NBD connection's.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use tierd::units::IoHint;

/// How random offsets are drawn.
#[derive(Debug, Clone, PartialEq)]
pub enum Skew {
    /// Every aligned offset equally likely.
    Uniform,
    /// Zipf over the region's chunks (`chunk` bytes each, ranks scrambled
    /// across the region and rotated by `shift` chunks), uniform inside a
    /// chunk.
    Zipf {
        /// Skew; 0.99 is YCSB's default.
        theta: f64,
        /// Chunk size (the extent size, so the hot set is a set of extents).
        chunk: u64,
        /// Rotation of the rank→chunk mapping (a hot-set shift).
        shift: u64,
    },
}

/// An access specification.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// Fraction of reads (the rest are writes), 0..=1.
    pub read: f64,
    /// Fraction of random requests (the rest continue sequentially).
    pub random: f64,
    /// Request sizes with weights.
    pub sizes: Vec<(u64, u32)>,
    /// Offsets are multiples of this.
    pub align: u64,
    /// First byte of the region.
    pub start: u64,
    /// Bytes in the region.
    pub len: u64,
    /// Random offset distribution.
    pub skew: Skew,
}

impl Spec {
    /// Fixed-size requests.
    pub fn simple(read: f64, random: f64, size: u64, start: u64, len: u64) -> Self {
        Spec {
            read,
            random,
            sizes: vec![(size, 1)],
            align: size.clamp(512, 4096),
            start,
            len,
            skew: Skew::Uniform,
        }
    }
}

/// YCSB-style Zipf sampler over `n` items.
#[derive(Debug, Clone)]
pub struct Zipf {
    n: u64,
    theta: f64,
    zetan: f64,
    alpha: f64,
    eta: f64,
}

impl Zipf {
    /// A sampler over `0..n`.
    pub fn new(n: u64, theta: f64) -> Self {
        let n = n.max(1);
        let zeta = |m: u64| (1..=m).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2.min(n));
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipf {
            n,
            theta,
            zetan,
            alpha,
            eta,
        }
    }

    /// A rank in `0..n`, 0 the most popular.
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        ((self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64).min(self.n - 1)
    }
}

/// Where each Zipf rank lives: a bijection of `0..n` (an affine map
/// `rank * a + c mod n` with `a` coprime to `n`, near the golden ratio of
/// `n`), so every chunk of the region holds exactly one rank and
/// neighbouring ranks land far apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scramble {
    n: u64,
    a: u64,
    c: u64,
}

impl Scramble {
    /// The permutation of `0..n`.
    pub fn new(n: u64) -> Self {
        let n = n.max(1);
        let gcd = |mut x: u64, mut y: u64| {
            while y != 0 {
                (x, y) = (y, x % y);
            }
            x
        };
        let mut a = ((n as f64 * 0.618_033_988_75) as u64).max(1);
        while gcd(a, n) != 1 {
            a += 1;
        }
        Scramble { n, a, c: n / 3 }
    }

    /// The chunk holding `rank`.
    pub fn chunk(&self, rank: u64) -> u64 {
        ((u128::from(rank % self.n) * u128::from(self.a) + u128::from(self.c)) % u128::from(self.n))
            as u64
    }
}

/// One request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Req {
    /// Read or write.
    pub read: bool,
    /// Offset.
    pub offset: u64,
    /// Length.
    pub len: u64,
    /// Stream hint.
    pub hint: IoHint,
}

/// A worker's request stream.
pub struct Generator {
    spec: Spec,
    rng: StdRng,
    zipf: Option<(Zipf, Scramble)>,
    next: u64,
    run: u64,
    weight_total: u32,
}

impl Generator {
    /// Worker `worker` of `workers` with `seed`; sequential cursors start
    /// spread over the region.
    pub fn new(spec: Spec, seed: u64, worker: usize, workers: usize) -> Self {
        let zipf = match spec.skew {
            Skew::Zipf { theta, chunk, .. } => {
                let n = (spec.len / chunk).max(1);
                Some((Zipf::new(n, theta), Scramble::new(n)))
            }
            Skew::Uniform => None,
        };
        let align = spec.align.max(1);
        let next = spec.start + (spec.len / workers.max(1) as u64 * worker as u64) / align * align;
        let weight_total = spec.sizes.iter().map(|s| s.1).sum::<u32>().max(1);
        Generator {
            rng: StdRng::seed_from_u64(seed ^ ((worker as u64 + 1) * 0x9E37_79B9)),
            spec,
            zipf,
            next,
            run: 0,
            weight_total,
        }
    }

    /// Change the hot-set rotation.
    pub fn set_shift(&mut self, shift: u64) {
        if let Skew::Zipf { shift: s, .. } = &mut self.spec.skew {
            *s = shift;
        }
    }

    fn size(&mut self) -> u64 {
        let mut pick = self.rng.gen_range(0..self.weight_total);
        for (size, w) in &self.spec.sizes {
            if pick < *w {
                return *size;
            }
            pick -= w;
        }
        self.spec.sizes.first().map(|s| s.0).unwrap_or(4096)
    }

    /// The next request.
    pub fn next_req(&mut self) -> Req {
        let len = self.size().min(self.spec.len);
        let read = self.rng.gen_bool(self.spec.read.clamp(0.0, 1.0));
        let align = self.spec.align.max(1);
        let end = self.spec.start + self.spec.len;
        let random = self.rng.gen_bool(self.spec.random.clamp(0.0, 1.0));
        let offset = if !random {
            if self.next + len > end {
                self.next = self.spec.start;
            }
            self.next
        } else {
            match (&self.spec.skew, &self.zipf) {
                (Skew::Zipf { chunk, shift, .. }, Some((z, perm))) => {
                    let n = (self.spec.len / chunk).max(1);
                    let c = (perm.chunk(z.sample(&mut self.rng)) + shift) % n;
                    let within = self.rng.gen_range(0..(chunk / align).max(1)) * align;
                    (self.spec.start + c * chunk + within).min(end - len) / align * align
                }
                _ => {
                    let slots = ((self.spec.len - len) / align).max(1);
                    self.spec.start + self.rng.gen_range(0..slots) * align
                }
            }
        };
        self.run = if offset == self.next {
            self.run + len
        } else {
            len
        };
        self.next = offset + len;
        Req {
            read,
            offset,
            len,
            hint: IoHint { seq_run: self.run },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scramble_is_a_permutation() {
        for n in [1u64, 2, 3, 10, 1000, 1024, 4096, 32768] {
            let p = Scramble::new(n);
            let mut seen = vec![false; n as usize];
            for r in 0..n {
                let c = p.chunk(r);
                assert!(c < n && !seen[c as usize], "n {n}: rank {r} -> {c} twice");
                seen[c as usize] = true;
            }
        }
        // Neighbouring ranks land apart, not side by side.
        let p = Scramble::new(1024);
        assert!(p.chunk(0).abs_diff(p.chunk(1)) > 100);
    }

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let z = Zipf::new(1000, 0.99);
        let mut rng = StdRng::seed_from_u64(1);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[z.sample(&mut rng) as usize] += 1;
        }
        // The top 10 % of ranks take well over half the draws.
        let top: u32 = counts[..100].iter().sum();
        assert!(top > 60_000, "{top}");
        assert!(counts[0] > counts[500] * 50);
    }

    #[test]
    fn sequential_streams_carry_growing_hints_and_stay_in_the_region() {
        let spec = Spec::simple(1.0, 0.0, 256 << 10, 1 << 20, 4 << 20);
        let mut g = Generator::new(spec, 1, 0, 1);
        let a = g.next_req();
        let b = g.next_req();
        assert_eq!((a.offset, b.offset), (1 << 20, (1 << 20) + (256 << 10)));
        assert_eq!(b.hint.seq_run, 512 << 10);
        for _ in 0..100 {
            let r = g.next_req();
            assert!(r.offset >= 1 << 20 && r.offset + r.len <= 5 << 20);
        }
        let spec = Spec::simple(0.0, 1.0, 4096, 0, 1 << 30);
        let mut g = Generator::new(spec, 1, 0, 1);
        for _ in 0..100 {
            let r = g.next_req();
            assert!(!r.read && r.offset.is_multiple_of(4096) && r.offset < 1 << 30);
        }
    }
}
