//! Shape arithmetic the passes and the emitters share.

/// NumPy broadcasting of two shapes (aligned at the last dim).
pub(crate) fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let at = |s: &[usize], d: usize| if d + s.len() >= rank { s[d + s.len() - rank] } else { 1 };
    (0..rank)
        .map(|d| match (at(a, d), at(b, d)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// Row-major strides (in elements) of a shape.
pub(crate) fn contiguous_strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1];
    }
    s
}

/// Output dims of a batch matrix multiply: `[batch.., m, n]`.
pub(crate) fn batch_matmul_sizes(a: &[usize], b: &[usize], transpose_b: bool) -> Option<Vec<usize>> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (m, k) = (a[a.len() - 2], a[a.len() - 1]);
    let (kb, n) = if transpose_b {
        (b[b.len() - 1], b[b.len() - 2])
    } else {
        (b[b.len() - 2], b[b.len() - 1])
    };
    if k != kb {
        return None;
    }
    let mut out = broadcast(&a[..a.len() - 2], &b[..b.len() - 2])?;
    out.extend([m, n]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        assert_eq!(broadcast(&[2, 1, 4], &[3, 1]), Some(vec![2, 3, 4]));
        assert_eq!(broadcast(&[2, 3], &[4, 3]), None);
        assert_eq!(broadcast(&[], &[5]), Some(vec![5]));
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(
            batch_matmul_sizes(&[4, 128, 64], &[4, 64, 128], false),
            Some(vec![4, 128, 128])
        );
        assert_eq!(
            batch_matmul_sizes(&[2, 1, 5, 3], &[4, 7, 3], true),
            Some(vec![2, 4, 5, 7])
        );
        assert_eq!(batch_matmul_sizes(&[5, 3], &[4, 3], false), None);
    }
}
