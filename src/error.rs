//! The public error type (cold path): one enum over the module errors, with a
//! coarse [`ErrorKind`] for callers that only branch on the category.

use crate::model::{ExternalDataError, ModelError, PayloadError};

/// Every error the runtime returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The model file could not be read or does not describe a usable model.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// An initializer's `external_data` entry is malformed or points somewhere
    /// it must not.
    #[error(transparent)]
    ExternalData(#[from] ExternalDataError),
    /// Reading a weight's payload failed.
    #[error(transparent)]
    Payload(#[from] PayloadError),
}

/// The category of an [`Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// See [`Error::Model`].
    Model,
    /// See [`Error::ExternalData`].
    ExternalData,
    /// See [`Error::Payload`].
    Payload,
}

impl Error {
    /// The category of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Model(_) => ErrorKind::Model,
            Error::ExternalData(_) => ErrorKind::ExternalData,
            Error::Payload(_) => ErrorKind::Payload,
        }
    }
}
