//! Stream images as items: `aws-sdk-dynamodbstreams` has its own `AttributeValue`, with the same
//! variants as `aws-sdk-dynamodb`'s.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodbstreams::types::AttributeValue as StreamValue;

use crate::error::Item;

/// A stream image (`Keys`, `OldImage`, `NewImage`) as an item.
pub(crate) fn item(image: &HashMap<String, StreamValue>) -> Item {
    image.iter().map(|(k, v)| (k.clone(), value(v))).collect()
}

/// One stream value as a DynamoDB value. A variant this SDK does not know (a newer service
/// type) becomes `NULL`; none exists today.
pub(crate) fn value(v: &StreamValue) -> AttributeValue {
    match v {
        StreamValue::S(s) => AttributeValue::S(s.clone()),
        StreamValue::N(n) => AttributeValue::N(n.clone()),
        StreamValue::B(b) => AttributeValue::B(b.clone()),
        StreamValue::Ss(s) => AttributeValue::Ss(s.clone()),
        StreamValue::Ns(s) => AttributeValue::Ns(s.clone()),
        StreamValue::Bs(s) => AttributeValue::Bs(s.clone()),
        StreamValue::M(m) => AttributeValue::M(item(m)),
        StreamValue::L(l) => AttributeValue::L(l.iter().map(value).collect()),
        StreamValue::Null(n) => AttributeValue::Null(*n),
        StreamValue::Bool(b) => AttributeValue::Bool(*b),
        _ => AttributeValue::Null(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_values_convert() {
        let mut m = HashMap::new();
        m.insert("n".to_string(), StreamValue::N("1.50".into()));
        m.insert(
            "l".to_string(),
            StreamValue::L(vec![
                StreamValue::Bool(true),
                StreamValue::Ss(vec!["a".into()]),
            ]),
        );
        let mut outer = HashMap::new();
        outer.insert("m".to_string(), StreamValue::M(m));
        let it = item(&outer);
        let AttributeValue::M(inner) = &it["m"] else {
            panic!("a map")
        };
        assert_eq!(inner["n"], AttributeValue::N("1.50".into()));
        assert_eq!(
            inner["l"],
            AttributeValue::L(vec![
                AttributeValue::Bool(true),
                AttributeValue::Ss(vec!["a".into()])
            ])
        );
    }
}
