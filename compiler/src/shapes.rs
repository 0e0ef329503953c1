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

/// Normalises a possibly negative dim for a tensor of rank `rank` (rank 0
/// accepts -1 and 0, as PyTorch does).
pub(crate) fn norm_dim(dim: i64, rank: usize) -> Result<usize, String> {
    let r = rank.max(1) as i64;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        Err(format!("dim {dim} is out of range for rank {rank}"))
    } else {
        Ok(d as usize)
    }
}

/// Normalises `dims` to a permutation of `0..rank`.
pub(crate) fn permutation(dims: &[i64], rank: usize) -> Result<Vec<usize>, String> {
    if dims.len() != rank {
        return Err(format!("{} dims for a tensor of rank {rank}", dims.len()));
    }
    let mut seen = vec![false; rank];
    let mut perm = Vec::new();
    for &d in dims {
        let d = norm_dim(d, rank)?;
        if std::mem::replace(&mut seen[d], true) {
            return Err(format!("dims {dims:?} are not a permutation"));
        }
        perm.push(d);
    }
    Ok(perm)
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
