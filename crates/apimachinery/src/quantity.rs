//! Resource quantities (`resource.Quantity`): `100m`, `0.5`, `128Mi`, `1G`, `1e3`, parsed to
//! the integer forms the scheduler and the kubelet count in: milli-units for CPU, units (bytes)
//! for everything else, both rounded up as upstream's `MilliValue` and `Value`.

use thiserror::Error;

/// A quantity that is not upstream's `<number><suffix>` form.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "quantity {input:?} must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)]
pub struct Error {
    pub input: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a quantity is written, as upstream's `resource.Format`: sums keep the format of their
/// first non-zero term, and [`format_canonical`] writes a value back in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// `1e3`, `5e-3`.
    DecimalExponent,
    /// `1Ki`, `128Mi`: powers of 1024.
    BinarySI,
    /// `100m`, `1k`, `2G`, plain numbers.
    #[default]
    DecimalSI,
}

/// A parsed quantity: `digits × 10^-scale × numerator / denominator`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    digits: u128,
    scale: u32,
    numerator: u128,
    denominator: u128,
    format: Format,
}

impl Quantity {
    pub fn parse(input: &str) -> Result<Quantity> {
        let err = || Error {
            input: input.to_string(),
        };
        let s = input.trim();
        let (negative, s) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let number_len = s
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(s.len());
        let (number, suffix) = s.split_at(number_len);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(err());
        }
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        let mut digits: u128 = 0;
        for c in int.chars().chain(frac.chars()) {
            digits = digits
                .checked_mul(10)
                .and_then(|d| d.checked_add(u128::from(c as u8 - b'0')))
                .ok_or_else(err)?;
        }
        let scale = frac.len() as u32;
        let pow10 = |e: u32| 10u128.checked_pow(e).ok_or_else(err);
        let format = if suffix.ends_with('i') {
            Format::BinarySI
        } else if suffix.starts_with(['e', 'E']) {
            Format::DecimalExponent
        } else {
            Format::DecimalSI
        };
        let (numerator, denominator) = match suffix {
            "" => (1, 1),
            "Ki" => (1 << 10, 1),
            "Mi" => (1 << 20, 1),
            "Gi" => (1 << 30, 1),
            "Ti" => (1 << 40, 1),
            "Pi" => (1 << 50, 1),
            "Ei" => (1 << 60, 1),
            "n" => (1, pow10(9)?),
            "u" => (1, pow10(6)?),
            "m" => (1, pow10(3)?),
            "k" => (pow10(3)?, 1),
            "M" => (pow10(6)?, 1),
            "G" => (pow10(9)?, 1),
            "T" => (pow10(12)?, 1),
            "P" => (pow10(15)?, 1),
            "E" => (pow10(18)?, 1),
            exp if exp.starts_with(['e', 'E']) => {
                let e: i32 = exp[1..].parse().map_err(|_| err())?;
                if e.unsigned_abs() > 30 {
                    return Err(err());
                }
                if e >= 0 {
                    (pow10(e as u32)?, 1)
                } else {
                    (1, pow10(e.unsigned_abs())?)
                }
            }
            _ => return Err(err()),
        };
        Ok(Quantity {
            negative,
            digits,
            scale,
            numerator,
            denominator,
            format,
        })
    }

    /// How it was written.
    pub fn format(&self) -> Format {
        self.format
    }

    /// In billionths (upstream's precision), rounded up, saturating at `i128`'s range: exact
    /// for every quantity an object can reasonably hold, memory in exbibytes included.
    pub fn nano_value(&self) -> i128 {
        let magnitude = self.scaled_wide(1_000_000_000);
        if self.negative { -magnitude } else { magnitude }
    }

    fn scaled_wide(&self, factor: u128) -> i128 {
        i128::try_from(self.magnitude(factor)).unwrap_or(i128::MAX)
    }

    /// The value times `factor`, rounded up (away from zero), saturating at `i64`'s range.
    fn scaled(&self, factor: u128) -> i64 {
        let magnitude = i64::try_from(self.magnitude(factor)).unwrap_or(i64::MAX);
        if self.negative { -magnitude } else { magnitude }
    }

    /// `|value| × factor` rounded up, saturating at `u128::MAX`. Powers of ten that the
    /// numerator (`factor`, a decimal suffix) shares with the denominator (the fraction's
    /// digits, `m`, `u`, `n`, negative exponents) cancel first, so a result that fits does not
    /// overflow on the way (`340300000000000000000000000100u` in nanos).
    fn magnitude(&self, factor: u128) -> u128 {
        let (mut numerator, mut factor) = (self.numerator, factor);
        let (mut scale, mut denominator) = (self.scale, self.denominator);
        for n in [&mut numerator, &mut factor] {
            while n.is_multiple_of(10) && (scale > 0 || denominator.is_multiple_of(10)) {
                *n /= 10;
                if scale > 0 {
                    scale -= 1;
                } else {
                    denominator /= 10;
                }
            }
        }
        let den = 10u128
            .checked_pow(scale)
            .and_then(|p| p.checked_mul(denominator));
        let num = self
            .digits
            .checked_mul(numerator)
            .and_then(|n| n.checked_mul(factor));
        match (num, den) {
            (Some(num), Some(den)) => num.div_ceil(den),
            (None, _) => u128::MAX,
            (Some(_), None) => 0,
        }
    }

    /// In thousandths, rounded up (`100m` → 100, `1` → 1000).
    pub fn milli_value(&self) -> i64 {
        self.scaled(1000)
    }

    /// In whole units, rounded up (`128Mi` → 134217728, `100m` → 1).
    pub fn value(&self) -> i64 {
        self.scaled(1)
    }
}

/// Writes `nanos` billionths in `format` as upstream's `Quantity.String()` does: the largest
/// suffix that keeps the number whole (`1500m`, `2`, `3k`; `256Mi`, and for a binary value that
/// is under 1024 or not whole bytes, the decimal form).
pub fn format_canonical(nanos: i128, format: Format) -> String {
    if nanos == 0 {
        return "0".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let magnitude = nanos.unsigned_abs();
    const NANO: u128 = 1_000_000_000;
    if format == Format::BinarySI && magnitude >= 1024 * NANO && magnitude.is_multiple_of(NANO) {
        let mut units = magnitude / NANO;
        let mut i = 0;
        while i < 6 && units.is_multiple_of(1024) {
            units /= 1024;
            i += 1;
        }
        let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][i];
        return format!("{sign}{units}{suffix}");
    }
    // exponent of ten, from -9 up in steps of three
    let mut number = magnitude;
    let mut exponent: i32 = -9;
    while exponent < 18 && number.is_multiple_of(1000) {
        number /= 1000;
        exponent += 3;
    }
    let suffix = if format == Format::DecimalExponent {
        if exponent == 0 {
            String::new()
        } else {
            format!("e{exponent}")
        }
    } else {
        match exponent {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            0 => "",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            _ => "E",
        }
        .to_string()
    };
    format!("{sign}{number}{suffix}")
}

impl std::str::FromStr for Quantity {
    type Err = Error;
    fn from_str(s: &str) -> Result<Quantity> {
        Quantity::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milli(s: &str) -> i64 {
        Quantity::parse(s).unwrap().milli_value()
    }

    fn value(s: &str) -> i64 {
        Quantity::parse(s).unwrap().value()
    }

    #[test]
    fn values_that_fit_do_not_overflow_on_the_way() {
        // found by the fuzz tests: 3.4e29 × 10^9 overflows u128 before the division by 10^6
        let q = Quantity::parse("340300000000000000000000000100u").unwrap();
        assert_eq!(q.nano_value(), 340_300_000_000_000_000_000_000_000_100_000);
        assert_eq!(q.value(), i64::MAX);
    }

    #[test]
    fn cpu_quantities_come_out_in_millicores() {
        assert_eq!(milli("100m"), 100);
        assert_eq!(milli("1"), 1000);
        assert_eq!(milli("0.5"), 500);
        assert_eq!(milli("2.25"), 2250);
        assert_eq!(milli("1500u"), 2, "rounded up as upstream's MilliValue");
        assert_eq!(milli("+3"), 3000);
        assert_eq!(milli("-1"), -1000);
    }

    #[test]
    fn memory_quantities_come_out_in_bytes() {
        assert_eq!(value("128Mi"), 128 << 20);
        assert_eq!(value("1Gi"), 1 << 30);
        assert_eq!(value("1G"), 1_000_000_000);
        assert_eq!(value("1.5Gi"), 3 << 29);
        assert_eq!(value("64k"), 64_000);
        assert_eq!(value("1e3"), 1000);
        assert_eq!(value("12E-1"), 2, "rounded up");
        assert_eq!(value("100m"), 1);
        assert_eq!(value("110"), 110);
    }

    #[test]
    fn huge_values_saturate_instead_of_overflowing() {
        assert_eq!(value("9999999999999999999999Ei"), i64::MAX);
    }

    #[test]
    fn canonical_forms_are_upstreams() {
        let canon = |s: &str| {
            let q = Quantity::parse(s).unwrap();
            format_canonical(q.nano_value(), q.format())
        };
        assert_eq!(canon("1000m"), "1");
        assert_eq!(canon("1500m"), "1500m");
        assert_eq!(canon("0.5"), "500m");
        assert_eq!(canon("2048Mi"), "2Gi");
        assert_eq!(canon("1536"), "1536");
        assert_eq!(canon("1000Mi"), "1000Mi");
        assert_eq!(canon("1.5Ki"), "1536");
        assert_eq!(canon("3000k"), "3M");
        assert_eq!(canon("1e3"), "1e3");
        assert_eq!(canon("0"), "0");
        assert_eq!(canon("16Ei"), "16Ei");
    }

    #[test]
    fn malformed_quantities_are_errors() {
        for bad in ["", "abc", "1.2.3", "12X", "1 Gi", "Gi", ".", "1e", "1e99"] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?} parsed");
        }
    }
}
