//! A pool's demand history for predictive scaling: the busiest demand of each bucket, and the forecaster fitted
//! on it.

use crate::autoscale::forecast::Model;
use crate::time::Time;

/// Per pool: the demand history in buckets and the fitted forecaster.
#[derive(Debug, Clone, Default)]
pub(crate) struct DemandHistory {
    pub(crate) bucket_start: Option<Time>,
    pub(crate) bucket_max: f64,
    pub(crate) values: Vec<f64>,
    pub(crate) model: Option<Model>,
    pub(crate) fitted_at: usize,
}
