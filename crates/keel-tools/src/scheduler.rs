//! The batch scheduler: runs one assistant message's tool calls.
//!
//! If any call in the batch is sequential, the whole batch runs one call at a
//! time in call order; otherwise all calls run concurrently. Either way the
//! results come back in call order, whatever order the calls completed in.

use std::future::Future;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use keel_protocol::BatchMode;

/// Runs `count` calls with `run_one(index)` and returns their outputs in
/// index order, along with the order in which they completed.
pub async fn run_batch<T, F, Fut>(count: usize, mode: BatchMode, run_one: F) -> BatchOutcome<T>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = T>,
{
    match mode {
        BatchMode::Sequential => {
            let mut results = Vec::with_capacity(count);
            for index in 0..count {
                results.push(run_one(index).await);
            }
            BatchOutcome {
                results,
                completion_order: (0..count).collect(),
            }
        }
        BatchMode::Parallel => {
            let mut running: FuturesUnordered<_> = (0..count)
                .map(|index| {
                    let future = run_one(index);
                    async move { (index, future.await) }
                })
                .collect();
            let mut slots: Vec<Option<T>> = (0..count).map(|_| None).collect();
            let mut completion_order = Vec::with_capacity(count);
            while let Some((index, result)) = running.next().await {
                completion_order.push(index);
                slots[index] = Some(result);
            }
            BatchOutcome {
                results: slots.into_iter().flatten().collect(),
                completion_order,
            }
        }
    }
}

/// The outputs of a batch.
#[derive(Debug)]
#[non_exhaustive]
pub struct BatchOutcome<T> {
    /// Outputs in call order.
    pub results: Vec<T>,
    /// Call indices in the order they completed.
    pub completion_order: Vec<usize>,
}
