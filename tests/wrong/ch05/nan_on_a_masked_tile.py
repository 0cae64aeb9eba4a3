# expect: not_finite from check_online_softmax(wrong)
def wrong(tiles):
    m, total, acc = torch.tensor(-math.inf), torch.tensor(0.0), 0
    for scores, values in tiles:
        scores, values = scores.float(), values.float()
        m_new = torch.maximum(m, scores.max())  # exp(-inf - -inf) on a masked first tile
        rescale, weights = torch.exp(m - m_new), torch.exp(scores - m_new)
        total, acc, m = total * rescale + weights.sum(), acc * rescale + weights @ values, m_new
    return acc / total, m + torch.log(total)
