# expect: precision
# check: check_online_softmax(wrong)
def wrong(tiles):
    m = total = acc = None
    for scores, values in tiles:  # in the tiles' own dtype: float16 sums lose digits
        m_new = scores.max() if m is None else torch.maximum(m, scores.max())
        if m_new == -math.inf:
            continue
        weights = torch.exp(scores - m_new)
        if acc is None or m == -math.inf:
            total, acc = weights.sum(), weights @ values
        else:
            rescale = torch.exp(m - m_new)
            total, acc = total * rescale + weights.sum(), acc * rescale + weights @ values
        m = m_new
    return (acc / total).float(), (m + torch.log(total)).float()
