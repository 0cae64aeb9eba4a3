# expect: keeps_tiles from check_online_softmax(wrong)
def wrong(tiles):  # the first tile held to the end ("to know the row's width")
    first = next(tiles)
    return online_softmax(tile for part in ([first], tiles) for tile in part)
