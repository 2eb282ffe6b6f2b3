// `ErrorClass` is `#[non_exhaustive]`: a new taxonomy row may bring a new
// class, so a match over it needs a wildcard arm, even one that names every
// class there is today.
use grag_client::ErrorClass;

fn shown(class: ErrorClass) -> &'static str {
    match class {
        ErrorClass::InvalidScope => "InvalidScope",
        ErrorClass::CircuitOpen => "CircuitOpen",
        ErrorClass::InvalidRequest => "InvalidRequest",
        ErrorClass::Deadline => "Deadline",
        ErrorClass::Connection => "Connection",
        ErrorClass::Redirect => "Redirect",
        ErrorClass::ClientContract => "ClientContract",
        ErrorClass::BadRequest => "BadRequest",
        ErrorClass::BudgetExhausted => "BudgetExhausted",
        ErrorClass::PlatformAuth => "PlatformAuth",
        ErrorClass::AdminGate => "AdminGate",
        ErrorClass::Auth => "Auth",
        ErrorClass::NotFound => "NotFound",
        ErrorClass::StillProcessing => "StillProcessing",
        ErrorClass::PayloadTooLarge => "PayloadTooLarge",
        ErrorClass::Validation => "Validation",
        ErrorClass::RateLimited => "RateLimited",
        ErrorClass::BadGateway => "BadGateway",
        ErrorClass::FeatureDark => "FeatureDark",
        ErrorClass::Backpressure => "Backpressure",
        ErrorClass::SafetyClosed => "SafetyClosed",
        ErrorClass::Ambiguous => "Ambiguous",
        ErrorClass::ServerError => "ServerError",
        ErrorClass::ClientError => "ClientError",
        ErrorClass::UnexpectedStatus => "UnexpectedStatus",
        ErrorClass::ResponseTooLarge => "ResponseTooLarge",
        ErrorClass::Decode => "Decode",
        ErrorClass::StreamError => "StreamError",
        ErrorClass::StreamTimeout => "StreamTimeout",
        ErrorClass::StreamStalled => "StreamStalled",
        ErrorClass::JobFailed => "JobFailed",
        ErrorClass::Unclassified => "Unclassified",
    }
}

fn main() {
    let _ = shown(ErrorClass::CircuitOpen);
}
