//! Checks an order and computes its total.
//!
//! Every problem is collected, then reported at once as a fatal step error with
//! the code `invalid_order` and the list in its details, so a workflow's error
//! handler can show them all.

use serde::{Deserialize, Serialize};
use weft_sdk::{Context, StepError};

#[derive(Deserialize)]
struct Order {
    id: String,
    currency: String,
    items: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    sku: String,
    quantity: i64,
    /// Price of one unit, in the currency's minor unit (cents).
    unit_price: i64,
}

#[derive(Serialize)]
struct Checked {
    order_id: String,
    currency: String,
    item_count: i64,
    /// In the currency's minor unit.
    total: i64,
}

const CURRENCIES: &[&str] = &["EUR", "GBP", "JPY", "USD"];

fn validate(ctx: &Context, order: Order) -> Result<Checked, StepError> {
    let mut problems = Vec::new();
    if order.id.trim().is_empty() {
        problems.push("id is empty".to_owned());
    }
    if !CURRENCIES.contains(&order.currency.as_str()) {
        problems.push(format!(
            "currency `{}` is not one of {CURRENCIES:?}",
            order.currency
        ));
    }
    if order.items.is_empty() {
        problems.push("the order has no items".to_owned());
    }
    let mut total: i64 = 0;
    let mut item_count: i64 = 0;
    for (i, item) in order.items.iter().enumerate() {
        if item.quantity <= 0 {
            problems.push(format!(
                "items[{i}] ({}): quantity must be positive",
                item.sku
            ));
        }
        if item.unit_price < 0 {
            problems.push(format!("items[{i}] ({}): unit_price is negative", item.sku));
        }
        let line = item.quantity.checked_mul(item.unit_price);
        match line.and_then(|line| total.checked_add(line)) {
            Some(sum) => total = sum,
            None => problems.push(format!("items[{i}] ({}): the total overflows", item.sku)),
        }
        item_count = item_count.saturating_add(item.quantity.max(0));
    }
    if !problems.is_empty() {
        return Err(StepError::fatal(
            "invalid_order",
            format!(
                "order `{}` has {} problem(s): {}",
                order.id,
                problems.len(),
                problems.join("; ")
            ),
        )
        .with_details(&serde_json::json!({ "problems": problems })));
    }
    weft_sdk::log::info(format!(
        "run {}: order {} is valid, total {} {}",
        ctx.run_id, order.id, total, order.currency
    ));
    Ok(Checked {
        order_id: order.id,
        currency: order.currency,
        item_count,
        total,
    })
}

weft_sdk::export_step!(validate, name = "validate-order");
