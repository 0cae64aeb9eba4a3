# expect: precision from check_online_softmax(wrong)
def wrong(tiles):
    m, total, acc = -math.inf, 0, 0
    for scores, values in tiles:  # in the tiles' own dtype: float16 sums lose digits
        m_new = max(m, scores.max())
        if m_new == -math.inf:
            continue
        weights, rescale = torch.exp(scores - m_new), torch.exp(m - m_new)
        total, acc, m = total * rescale + weights.sum(), acc * rescale + weights @ values, m_new
    return (acc / total).float(), (m + torch.log(total)).float()
