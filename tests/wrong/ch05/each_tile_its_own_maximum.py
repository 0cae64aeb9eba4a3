# expect: missing_rescale from check_online_softmax(wrong)
def wrong(tiles):
    total = acc = 0
    for scores, values in tiles:
        weights = torch.exp(scores.float() - scores.float().max())
        total, acc = total + weights.sum(), acc + weights @ values.float()
    return acc / total, torch.log(total)
