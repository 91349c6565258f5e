//! Paging through a Query or Scan whose pages hold items a reader may not see.

use super::*;

/// `Limit` counts stored items: pages can be short, but paging returns everything exactly once.
#[tokio::test]
async fn pagination_with_limit_skips_invisible_items() {
    let env = TestEnv::new("iso-pages").await;
    for i in 0..10 {
        env.raw_put(
            &env.range_table,
            item(&[("Id", s("p")), ("RangeAttr", n(i)), ("v", n(i))]),
        )
        .await;
    }
    let tx = env.manager.begin();
    // Pending inserts at odd ranges 11..19 and a pending update of range 0.
    for i in [11, 13, 15, 17, 19, 0] {
        tx.update_item()
            .table_name(&env.range_table)
            .key("Id", s("p"))
            .key("RangeAttr", n(i))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(-1))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .unwrap();
    }
    let query = || {
        env.manager
            .query()
            .table_name(&env.range_table)
            .key_condition_expression("Id = :p")
            .expression_attribute_values(":p", s("p"))
            .limit(3)
    };
    let values = |items: &[Item]| -> Vec<i64> {
        items
            .iter()
            .map(|i| i["v"].as_n().unwrap().parse().unwrap())
            .collect()
    };
    let all = query().isolation(COMMITTED).send_all().await.unwrap();
    assert_eq!(values(&all), (0..10).collect::<Vec<_>>());
    let all = query().isolation(UNCOMMITTED).send_all().await.unwrap();
    assert_eq!(values(&all).len(), 15);
    assert_eq!(values(&all)[0], -1);
    // Page by page, descending.
    let pages: Vec<_> = query()
        .scan_index_forward(false)
        .isolation(COMMITTED)
        .into_pages()
        .try_collect()
        .await
        .unwrap();
    assert!(pages.len() >= 5, "{} pages", pages.len());
    assert!(
        pages.iter().any(|p| p.items().len() < 3),
        "some page is short"
    );
    let flat: Vec<Item> = pages.iter().flat_map(|p| p.items().to_vec()).collect();
    assert_eq!(values(&flat), (0..10).rev().collect::<Vec<_>>());
    // Resuming from a page's last key.
    let first = query().isolation(COMMITTED).send().await.unwrap();
    let rest = query()
        .set_exclusive_start_key(first.last_evaluated_key.clone())
        .isolation(COMMITTED)
        .send_all()
        .await
        .unwrap();
    assert_eq!(first.items.len() + rest.len(), 10);
    // A parallel scan covers every item once.
    let mut seen = Vec::new();
    for seg in 0..3 {
        let part = env
            .manager
            .scan()
            .table_name(&env.range_table)
            .segment(seg)
            .total_segments(3)
            .filter_expression("Id = :p")
            .expression_attribute_values(":p", s("p"))
            .isolation(COMMITTED)
            .send_all()
            .await
            .unwrap();
        seen.extend(values(&part));
    }
    seen.sort();
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
    tx.rollback().await.unwrap();
}
