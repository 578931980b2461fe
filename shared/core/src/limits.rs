//! Bounds on what one caller's request may ask for, checked before any work is done on it, and
//! the size of a message on weft's internal gRPC hops. The gateway checks them so a client gets
//! a 400 that says which bound it crossed; the router checks them again for every driver, so a
//! request reaching it some other way (the executor, a future front door) is bounded too.

use crate::Error;

/// Inputs in one embeddings request (OpenAI's own limit).
pub const EMBED_MAX_INPUTS: usize = 2048;
/// `dimensions` of one embeddings request: above every model's native size.
pub const EMBED_MAX_DIMENSIONS: u32 = 8192;
/// Bytes of text across all inputs of one embeddings request.
pub const EMBED_MAX_INPUT_BYTES: usize = 2 * 1024 * 1024;
/// Numbers in one embeddings answer (inputs × dimensions): 4 MiB as `f32`, about 20 MB of JSON.
pub const EMBED_MAX_VALUES: usize = 1 << 20;
/// The largest message a weft service accepts from another on an internal gRPC hop. Above the
/// largest body the gateway accepts and the largest embeddings answer, with room for framing.
pub const INTERNAL_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Checks an embeddings request: `total_bytes` is the length of all inputs together.
pub fn check_embed_request(
    inputs: usize,
    total_bytes: usize,
    dimensions: Option<u32>,
) -> Result<(), Error> {
    if inputs == 0 {
        return Err(Error::invalid("`input` must not be empty").with_param("input"));
    }
    if inputs > EMBED_MAX_INPUTS {
        return Err(Error::invalid(format!(
            "`input` has {inputs} items; at most {EMBED_MAX_INPUTS} per request, so split it"
        ))
        .with_param("input"));
    }
    if total_bytes > EMBED_MAX_INPUT_BYTES {
        return Err(Error::invalid(format!(
            "`input` holds {total_bytes} bytes of text; at most {EMBED_MAX_INPUT_BYTES} per request, so split it"
        ))
        .with_param("input"));
    }
    if let Some(d) = dimensions {
        if !(1..=EMBED_MAX_DIMENSIONS).contains(&d) {
            return Err(Error::invalid(format!(
                "`dimensions` must be between 1 and {EMBED_MAX_DIMENSIONS}, got {d}"
            ))
            .with_param("dimensions"));
        }
        check_embed_answer(inputs, usize::try_from(d).unwrap_or(usize::MAX))?;
    }
    Ok(())
}

/// Checks the size of an embeddings answer of `inputs` vectors of `dimensions` numbers.
pub fn check_embed_answer(inputs: usize, dimensions: usize) -> Result<(), Error> {
    let values = inputs.saturating_mul(dimensions);
    if values > EMBED_MAX_VALUES {
        return Err(Error::invalid(format!(
            "the answer would hold {values} numbers ({inputs} inputs × {dimensions} dimensions), \
             more than weft returns in one answer ({EMBED_MAX_VALUES}); send fewer inputs per \
             request or ask for fewer `dimensions`"
        ))
        .with_param("input"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embed_bounds_name_the_field() {
        assert!(check_embed_request(1, 10, None).is_ok());
        assert!(check_embed_request(2048, 10, Some(512)).is_ok());
        let e = check_embed_request(1, 10, Some(300_000_000)).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("dimensions"));
        let e = check_embed_request(1, 10, Some(0)).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("dimensions"));
        let e = check_embed_request(100_000, 10, None).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input"));
        let e = check_embed_request(3, EMBED_MAX_INPUT_BYTES + 1, None).unwrap_err();
        assert!(e.message.contains("bytes"), "{}", e.message);
        let e = check_embed_request(2048, 10, Some(8192)).unwrap_err();
        assert!(e.message.contains("fewer"), "{}", e.message);
        assert!(check_embed_answer(2048, 3072).is_err());
        assert!(check_embed_answer(256, 3072).is_ok());
    }
}
