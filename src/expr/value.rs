//! Equality and order of attribute values as DynamoDB compares them (numbers by value, whatever
//! their spelling; sets regardless of order).

use std::cmp::Ordering;

use aws_sdk_dynamodb::types::AttributeValue;

/// Numeric order of two DynamoDB numbers (any spelling).
pub(crate) fn num_cmp(a: &str, b: &str) -> Option<Ordering> {
    // (sign, significant digits without leading or trailing zeros, exponent); zero is
    // (false, "", 0).
    let parse = crate::keys::decompose;
    let (an, ad, ae) = parse(a)?;
    let (bn, bd, be) = parse(b)?;
    let sign = |neg: bool, d: &str| -> i8 {
        if d.is_empty() {
            0
        } else if neg {
            -1
        } else {
            1
        }
    };
    let (sa, sb) = (sign(an, &ad), sign(bn, &bd));
    if sa != sb || sa == 0 {
        return Some(sa.cmp(&sb));
    }
    // Same sign, both non-zero: compare magnitudes (position of the leading digit, then digits).
    let mag = (ad.len() as i64 + ae)
        .cmp(&(bd.len() as i64 + be))
        .then_with(|| ad.cmp(&bd));
    Some(if sa < 0 { mag.reverse() } else { mag })
}

/// Most significant digits a DynamoDB number has.
const MAX_DIGITS: usize = 38;

/// `a + b` (or `a - b` when `subtract`) as DynamoDB computes it, in DynamoDB's canonical text;
/// `None` when an operand is not a number or the exact result is not a number DynamoDB stores as
/// is (more than 38 significant digits, or a magnitude outside 1e-130 to 1e126).
pub(crate) fn num_add(a: &str, b: &str, subtract: bool) -> Option<String> {
    let (an, ad, ae) = crate::keys::decompose(a)?;
    let (bn, bd, be) = crate::keys::decompose(b)?;
    let bn = bn != subtract; // subtracting flips b's sign
    let exp = ae.min(be);
    // Both magnitudes as digit vectors over the common exponent (most significant first).
    let scale = |d: &str, e: i64| -> Option<Vec<u8>> {
        let shift = usize::try_from(e - exp).ok().filter(|s| *s <= 400)?;
        Some(
            d.bytes()
                .map(|c| c - b'0')
                .chain(std::iter::repeat_n(0, shift))
                .collect(),
        )
    };
    let (x, y) = (scale(&ad, ae)?, scale(&bd, be)?);
    let (neg, mag) = if ad.is_empty() || bd.is_empty() || an == bn {
        (if ad.is_empty() { bn } else { an }, add_digits(&x, &y))
    } else {
        match cmp_digits(&x, &y) {
            Ordering::Less => (bn, sub_digits(&y, &x)),
            _ => (an, sub_digits(&x, &y)),
        }
    };
    let text: String = mag.iter().map(|d| char::from(b'0' + d)).collect();
    if text.trim_start_matches('0').is_empty() {
        return Some("0".into());
    }
    let sign = if neg { "-" } else { "" };
    let (neg, digits, e) = crate::keys::decompose(&format!("{sign}{text}e{exp}"))?;
    let lead = digits.len() as i64 - 1 + e; // 10^lead <= |result| < 10^(lead + 1)
    if digits.len() > MAX_DIGITS || !(-130..=125).contains(&lead) {
        return None;
    }
    crate::keys::canonical_number(&format!("{}{digits}e{e}", if neg { "-" } else { "" }))
}

/// Order of two magnitudes given as digit vectors (leading zeros allowed).
fn cmp_digits(a: &[u8], b: &[u8]) -> Ordering {
    fn strip(d: &[u8]) -> &[u8] {
        d.iter().position(|x| *x != 0).map_or(&[], |i| &d[i..])
    }
    let (a, b) = (strip(a), strip(b));
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

fn add_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len().max(b.len()) + 1);
    let (mut i, mut j, mut carry) = (a.len(), b.len(), 0u8);
    while i > 0 || j > 0 || carry > 0 {
        let mut s = carry;
        if i > 0 {
            i -= 1;
            s += a[i];
        }
        if j > 0 {
            j -= 1;
            s += b[j];
        }
        out.push(s % 10);
        carry = s / 10;
    }
    out.reverse();
    out
}

/// `a - b` for `a >= b`.
fn sub_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len());
    let (mut i, mut j, mut borrow) = (a.len(), b.len(), 0i8);
    while i > 0 {
        i -= 1;
        let mut d = a[i] as i8 - borrow;
        if j > 0 {
            j -= 1;
            d -= b[j] as i8;
        }
        borrow = i8::from(d < 0);
        out.push((d + 10 * borrow) as u8);
    }
    out.reverse();
    out
}

pub(crate) fn num_eq(a: &str, b: &str) -> bool {
    num_cmp(a, b) == Some(Ordering::Equal)
}

fn set_eq<T, F: Fn(&T, &T) -> bool>(a: &[T], b: &[T], eq: F) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.iter().any(|y| eq(x, y)))
}

/// Whether two values are equal as DynamoDB's `=` decides.
pub fn value_eq(a: &AttributeValue, b: &AttributeValue) -> bool {
    use AttributeValue as V;
    match (a, b) {
        (V::N(x), V::N(y)) => num_eq(x, y),
        (V::S(x), V::S(y)) => x == y,
        (V::B(x), V::B(y)) => x.as_ref() == y.as_ref(),
        (V::Bool(x), V::Bool(y)) => x == y,
        (V::Null(_), V::Null(_)) => true,
        (V::Ss(x), V::Ss(y)) => set_eq(x, y, |p, q| p == q),
        (V::Ns(x), V::Ns(y)) => set_eq(x, y, |p, q| num_eq(p, q)),
        (V::Bs(x), V::Bs(y)) => set_eq(x, y, |p, q| p.as_ref() == q.as_ref()),
        (V::L(x), V::L(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| value_eq(p, q)),
        (V::M(x), V::M(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, p)| y.get(k).is_some_and(|q| value_eq(p, q)))
        }
        _ => false,
    }
}

/// The order of two scalars of the same ordered type (numbers, strings, binaries).
pub(crate) fn order(a: &AttributeValue, b: &AttributeValue) -> Option<Ordering> {
    use AttributeValue as V;
    match (a, b) {
        (V::N(x), V::N(y)) => num_cmp(x, y),
        (V::S(x), V::S(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        (V::B(x), V::B(y)) => Some(x.as_ref().cmp(y.as_ref())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_numerically() {
        assert_eq!(num_cmp("1", "1.0"), Some(Ordering::Equal));
        assert_eq!(num_cmp("2", "10"), Some(Ordering::Less));
        assert_eq!(num_cmp("-2", "-10"), Some(Ordering::Greater));
        assert_eq!(num_cmp("0", "-0.0001"), Some(Ordering::Greater));
        assert_eq!(num_cmp("0.15", "0.151"), Some(Ordering::Less));
        assert_eq!(num_cmp("1e3", "999.99"), Some(Ordering::Greater));
        assert_eq!(num_cmp("0", "0.000"), Some(Ordering::Equal));
        assert_eq!(num_cmp("x", "1"), None);
    }

    #[test]
    fn numbers_add_exactly() {
        let add = |a: &str, b: &str| num_add(a, b, false);
        let sub = |a: &str, b: &str| num_add(a, b, true);
        assert_eq!(add("1", "1").as_deref(), Some("2"));
        assert_eq!(add("0.1", "0.2").as_deref(), Some("0.3"));
        assert_eq!(add("1.50", "-1.5").as_deref(), Some("0"));
        assert_eq!(add("99", "1").as_deref(), Some("100"));
        assert_eq!(sub("1", "3").as_deref(), Some("-2"));
        assert_eq!(sub("-1", "-3").as_deref(), Some("2"));
        assert_eq!(add("-5", "2").as_deref(), Some("-3"));
        assert_eq!(add("1e3", "1e-3").as_deref(), Some("1000.001"));
        assert_eq!(add("0", "-7.25").as_deref(), Some("-7.25"));
        assert_eq!(sub("0", "7.25").as_deref(), Some("-7.25"));
        assert_eq!(sub("0", "0").as_deref(), Some("0"));
        assert_eq!(sub("0.5", "0.50").as_deref(), Some("0"));
        let big = format!("2{}", "0".repeat(100));
        assert_eq!(add("1e100", "1e100"), Some(big));
        // 38 significant digits are kept; 39 are not a number DynamoDB stores as is.
        let d38 = "9".repeat(38);
        assert_eq!(add(&d38, "0").as_deref(), Some(&d38[..]));
        assert_eq!(add(&d38, "1"), Some(format!("1{}", "0".repeat(38))));
        assert_eq!(add(&d38, "0.1"), None);
        assert_eq!(add("1e125", "9e125"), None);
        let tiny = format!("0.{}1", "0".repeat(129));
        assert_eq!(add("1e-130", "0"), Some(tiny));
        assert_eq!(add("x", "1"), None);
    }
}
