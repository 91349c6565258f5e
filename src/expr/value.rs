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

pub(crate) fn num_eq(a: &str, b: &str) -> bool {
    num_cmp(a, b) == Some(Ordering::Equal)
}

fn set_eq<T, F: Fn(&T, &T) -> bool>(a: &[T], b: &[T], eq: F) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.iter().any(|y| eq(x, y)))
}

/// Whether two values are equal as DynamoDB's `=` decides.
pub(crate) fn value_eq(a: &AttributeValue, b: &AttributeValue) -> bool {
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
}
