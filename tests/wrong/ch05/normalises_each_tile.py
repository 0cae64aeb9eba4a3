# expect: wrong_result from check_online_softmax(wrong)
def wrong(tiles):
    m = total = acc = None
    for scores, values in tiles:
        scores, values = scores.float(), values.float()
        if scores.max() == -math.inf:
            continue
        m_new = scores.max() if m is None else torch.maximum(m, scores.max())
        w = torch.exp(scores - m_new)
        tile_out = (w @ values) / w.sum()
        if acc is None:
            total, acc = w.sum(), tile_out
        else:
            total, acc = total * torch.exp(m - m_new) + w.sum(), (acc + tile_out) / 2
        m = m_new
    return acc, m + torch.log(total)
