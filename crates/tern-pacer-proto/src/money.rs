//! Money as integers: micro-units of one currency, with the currency in the type. An amount ([`Micros`]) and a
//! price per thousand impressions ([`Cpm`]) are different types, so charging a CPM as if it were the price of
//! one impression, or adding dollars to euros, does not compile. Arithmetic never wraps and never panics:
//! sums saturate (a ledger never holds anything near `u64::MAX` micros, 18 trillion units of a currency) and
//! differences are checked or saturating by name.
//!
//! ```
//! use tern_pacer_proto::money::{Cpm, Micros, Usd};
//! let spent = Micros::<Usd>::from_units(1);
//! let price = Cpm::<Usd>::from_units(2).per_impression();
//! assert_eq!(spent.saturating_add(price).micros(), 1_002_000);
//! ```
//!
//! Adding a CPM to an amount does not compile:
//! ```compile_fail
//! use tern_pacer_proto::money::{Cpm, Micros, Usd};
//! let spent = Micros::<Usd>::from_units(1);
//! spent.saturating_add(Cpm::<Usd>::from_units(2));
//! ```
//! Nor does adding euros to dollars:
//! ```compile_fail
//! use tern_pacer_proto::money::{Eur, Micros, Usd};
//! Micros::<Usd>::from_units(1).saturating_add(Micros::<Eur>::from_units(1));
//! ```

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;

/// A currency, as a zero-sized marker type.
pub trait Currency:
    Copy + Clone + Eq + Ord + Hash + Default + fmt::Debug + Send + Sync + 'static
{
    /// The ISO 4217 code, as carried on the wire.
    const CODE: [u8; 3];
}

macro_rules! currencies {
    ($($name:ident => $code:literal),* $(,)?) => {$(
        #[doc = concat!("The currency ", $code, ".")]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name;
        impl Currency for $name {
            const CODE: [u8; 3] = *$code.as_bytes().first_chunk::<3>().unwrap();
        }
    )*};
}

currencies!(Usd => "USD", Eur => "EUR", Gbp => "GBP");

/// An amount of money in millionths of a unit of `C` (1 USD = 1,000,000 `Micros<Usd>`).
pub struct Micros<C>(u64, PhantomData<C>);

/// A price per thousand impressions (CPM), in micro-units of `C`: what exchanges quote and gateways send.
/// The amount one impression costs is [`Cpm::per_impression`].
pub struct Cpm<C>(u64, PhantomData<C>);

// Hand-written so that `C` needs no bounds beyond being a marker (derives would demand `C: Clone` etc. on
// every use site through `PhantomData`).
macro_rules! money_traits {
    ($ty:ident, $unit:literal) => {
        impl<C> Clone for $ty<C> {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<C> Copy for $ty<C> {}
        impl<C> PartialEq for $ty<C> {
            fn eq(&self, other: &Self) -> bool {
                self.0 == other.0
            }
        }
        impl<C> Eq for $ty<C> {}
        impl<C> PartialOrd for $ty<C> {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }
        impl<C> Ord for $ty<C> {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                self.0.cmp(&other.0)
            }
        }
        impl<C> Hash for $ty<C> {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.0.hash(state)
            }
        }
        impl<C> Default for $ty<C> {
            fn default() -> Self {
                Self::ZERO
            }
        }
        impl<C> fmt::Debug for $ty<C> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}µ{}", self.0, $unit)
            }
        }
        impl<C: Currency> fmt::Display for $ty<C> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let code = std::str::from_utf8(&C::CODE).unwrap_or("???");
                write!(
                    f,
                    "{}.{:06} {}{}",
                    self.0 / 1_000_000,
                    self.0 % 1_000_000,
                    code,
                    $unit
                )
            }
        }
        impl<C> $ty<C> {
            pub const ZERO: Self = Self(0, PhantomData);
            pub const fn from_micros(micros: u64) -> Self {
                Self(micros, PhantomData)
            }
            /// Whole units of the currency (e.g. dollars), saturating.
            pub const fn from_units(units: u64) -> Self {
                Self(units.saturating_mul(1_000_000), PhantomData)
            }
            pub const fn micros(self) -> u64 {
                self.0
            }
            pub const fn is_zero(self) -> bool {
                self.0 == 0
            }
            /// Parses a decimal amount of whole units, as written in configuration files: `"12"`, `"0.5"`,
            /// `"1234.567890"` (at most six decimals, no sign, no exponent: exactly what a micro-unit holds).
            pub fn parse_units(text: &str) -> Result<Self, ParseMoneyError> {
                parse_micros(text).map(Self::from_micros)
            }
        }
    };
}

/// Why a decimal amount was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseMoneyError(pub &'static str);

impl fmt::Display for ParseMoneyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for ParseMoneyError {}

fn parse_micros(text: &str) -> Result<u64, ParseMoneyError> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || !digits(whole)
        || !digits(fraction)
        || (text.contains('.') && fraction.is_empty())
    {
        return Err(ParseMoneyError(
            "expected digits with an optional decimal point, like 12.50",
        ));
    }
    if fraction.len() > 6 {
        return Err(ParseMoneyError(
            "more than six decimals (below a micro-unit)",
        ));
    }
    let too_large = ParseMoneyError("amount too large");
    let units: u64 = whole.parse().map_err(|_| too_large.clone())?;
    let micros: u64 = format!("{fraction:0<6}").parse().unwrap_or(0);
    units
        .checked_mul(1_000_000)
        .and_then(|m| m.checked_add(micros))
        .ok_or(too_large)
}

money_traits!(Micros, "");
money_traits!(Cpm, " CPM");

impl<C> Micros<C> {
    pub const fn saturating_add(self, other: Self) -> Self {
        Self(self.0.saturating_add(other.0), PhantomData)
    }
    pub const fn saturating_sub(self, other: Self) -> Self {
        Self(self.0.saturating_sub(other.0), PhantomData)
    }
    pub fn checked_sub(self, other: Self) -> Option<Self> {
        self.0.checked_sub(other.0).map(Self::from_micros)
    }
    /// `self * numerator / denominator`, rounded down, without intermediate overflow; zero if `denominator`
    /// is zero. Used for plans ("this fraction of the budget by now").
    pub fn scale(self, numerator: u64, denominator: u64) -> Self {
        if denominator == 0 {
            return Self::ZERO;
        }
        let scaled = u128::from(self.0) * u128::from(numerator) / u128::from(denominator);
        Self::from_micros(u64::try_from(scaled).unwrap_or(u64::MAX))
    }
}

impl<C> std::iter::Sum for Micros<C> {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        iter.fold(Self::ZERO, Self::saturating_add)
    }
}

impl<C> Cpm<C> {
    /// What one impression costs at this CPM, rounded up to the next micro-unit: the ledger reserves and
    /// charges the rounded-up amount, so its count of spend is never below what the exchange bills.
    pub const fn per_impression(self) -> Micros<C> {
        Micros::from_micros(self.0.div_ceil(1000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpm_per_impression_rounds_up() {
        assert_eq!(
            Cpm::<Usd>::from_micros(1_500_000).per_impression().micros(),
            1500
        );
        assert_eq!(
            Cpm::<Usd>::from_micros(1_500_001).per_impression().micros(),
            1501
        );
        assert_eq!(Cpm::<Usd>::from_micros(0).per_impression().micros(), 0);
        assert_eq!(
            Cpm::<Usd>::from_micros(u64::MAX).per_impression().micros(),
            u64::MAX.div_ceil(1000)
        );
    }

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        let max = Micros::<Eur>::from_micros(u64::MAX);
        assert_eq!(max.saturating_add(Micros::from_micros(1)), max);
        assert_eq!(Micros::<Eur>::ZERO.saturating_sub(max), Micros::ZERO);
        assert_eq!(
            Micros::<Eur>::ZERO.checked_sub(Micros::from_micros(1)),
            None
        );
        assert_eq!(max.scale(u64::MAX, 1), max);
        assert_eq!(
            Micros::<Eur>::from_units(10).scale(1, 4).micros(),
            2_500_000
        );
        assert_eq!(Micros::<Eur>::from_units(10).scale(1, 0), Micros::ZERO);
    }

    #[test]
    fn parses_decimal_units_exactly() {
        assert_eq!(
            Micros::<Usd>::parse_units("12").unwrap().micros(),
            12_000_000
        );
        assert_eq!(Micros::<Usd>::parse_units("0.5").unwrap().micros(), 500_000);
        assert_eq!(
            Cpm::<Usd>::parse_units("1.000001").unwrap().micros(),
            1_000_001
        );
        for bad in [
            "",
            ".5",
            "5.",
            "-1",
            "1e3",
            "1.0000001",
            "1,5",
            " 1",
            "18446744073710",
        ] {
            assert!(Micros::<Usd>::parse_units(bad).is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn parse_inverts_display(micros in 0u64..u64::MAX / 2) {
            let m = Micros::<Usd>::from_micros(micros);
            let text = m.to_string();
            let number = text.strip_suffix(" USD").unwrap();
            proptest::prop_assert_eq!(Micros::<Usd>::parse_units(number), Ok(m));
        }

        #[test]
        fn parse_never_panics(text in "\\PC{0,30}") {
            let _ = Micros::<Usd>::parse_units(&text);
        }
    }

    #[test]
    fn display_shows_units_and_currency() {
        assert_eq!(
            Micros::<Usd>::from_micros(1_250_000).to_string(),
            "1.250000 USD"
        );
        assert_eq!(
            Cpm::<Gbp>::from_micros(2_000_001).to_string(),
            "2.000001 GBP CPM"
        );
    }
}
