//! ReturnValues (Java 21-28)

use super::*;

#[tokio::test]
async fn put_item_all_old_insert() {
    // AllOld locks now; the put is applied at commit.
    let fx = fixture("jp-putoldins").await;
    let k1 = key("item1");
    let item1 = item1();
    let t1 = fx.manager.begin();
    let out = put(&t1, &fx.table, &item1)
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k1, Some(&k1), t1.id(), true, false).await;
    assert_eq!(out.attributes, None);
    t1.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&item1)).await;
}

#[tokio::test]
async fn put_item_all_old_overwrite() {
    // AllOld locks now; the put is applied at commit.
    let fx = fixture("jp-putoldover").await;
    let k0 = key("item0");
    let item1 = with(&fx.item0, &[("asdf", s("wef"))]);
    let t1 = fx.manager.begin();
    let out = put(&t1, &fx.table, &item1)
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k0, Some(&fx.item0), t1.id(), false, false).await;
    assert_eq!(out.attributes.as_ref(), Some(&fx.item0));
    t1.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k0, Some(&item1)).await;
}

#[tokio::test]
async fn update_item_all_old_insert() {
    // AllOld locks now; the update is applied at commit.
    let fx = fixture("jp-updoldins").await;
    let k1 = key("item1");
    let item1 = item1();
    let t1 = fx.manager.begin();
    let out = set_asdf(&t1, &fx.table, "item1", "wef")
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k1, Some(&k1), t1.id(), true, false).await;
    assert_eq!(out.attributes, None);
    t1.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&item1)).await;
}

#[tokio::test]
async fn update_item_all_old_overwrite() {
    // AllOld locks now; the update is applied at commit.
    let fx = fixture("jp-updoldover").await;
    let k0 = key("item0");
    let item1 = with(&fx.item0, &[("asdf", s("wef"))]);
    let t1 = fx.manager.begin();
    let out = set_asdf(&t1, &fx.table, "item0", "wef")
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k0, Some(&fx.item0), t1.id(), false, false).await;
    assert_eq!(out.attributes.as_ref(), Some(&fx.item0));
    t1.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k0, Some(&item1)).await;
}

#[tokio::test]
async fn update_item_all_new_insert() {
    let fx = fixture("jp-updnewins").await;
    let k1 = key("item1");
    let item1 = item1();
    let t1 = fx.manager.begin();
    let out = set_asdf(&t1, &fx.table, "item1", "wef")
        .return_values(AllNew)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k1, Some(&item1), t1.id(), true, true).await;
    assert_eq!(out.attributes.as_ref(), Some(&item1));
    t1.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&item1)).await;
}

#[tokio::test]
async fn update_item_all_new_overwrite() {
    let fx = fixture("jp-updnewover").await;
    let k0 = key("item0");
    let item1 = with(&fx.item0, &[("asdf", s("wef"))]);
    let t1 = fx.manager.begin();
    let out = set_asdf(&t1, &fx.table, "item0", "wef")
        .return_values(AllNew)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k0, Some(&item1), t1.id(), false, true).await;
    assert_image(&fx, &fx.table, &k0, &fx.item0).await;
    assert_eq!(out.attributes.as_ref(), Some(&item1));
    t1.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k0, Some(&item1)).await;
}

#[tokio::test]
async fn delete_item_all_old_not_exists() {
    let fx = fixture("jp-deloldnotex").await;
    let k1 = key("item1");
    let t1 = fx.manager.begin();
    let out = delete(&t1, &fx.table, "item1")
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k1, Some(&k1), t1.id(), true, false).await;
    assert_eq!(out.attributes, None);
    t1.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, None).await;
}

#[tokio::test]
async fn delete_item_all_old_exists() {
    let fx = fixture("jp-deloldex").await;
    let k0 = key("item0");
    let t1 = fx.manager.begin();
    let out = delete(&t1, &fx.table, "item0")
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k0, Some(&fx.item0), t1.id(), false, false).await;
    assert_eq!(out.attributes.as_ref(), Some(&fx.item0));
    t1.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k0, None).await;
}
