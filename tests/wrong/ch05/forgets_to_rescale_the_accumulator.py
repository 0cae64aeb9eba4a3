# expect: missing_rescale from check_online_softmax(wrong)
def wrong(tiles):
    m, total, acc = torch.tensor(-math.inf), torch.tensor(0.0), 0
    for scores, values in tiles:
        scores, values = scores.float(), values.float()
        m_new = torch.maximum(m, scores.max())
        if m_new == -math.inf:
            continue
        weights = torch.exp(scores - m_new)
        total = total * torch.exp(m - m_new) + weights.sum()
        acc, m = acc + weights @ values, m_new  # the accumulator is never rescaled
    return acc / total, m + torch.log(total)
